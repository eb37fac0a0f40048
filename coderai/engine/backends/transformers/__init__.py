"""Hugging Face transformers on torch: loading, batched decoding, sampling, detokenization,
token bytes, GPU memory shares."""
