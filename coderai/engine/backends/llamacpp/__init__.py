"""llama.cpp (llama-cpp-python): loading GGUF models, many sequences in one context, KV
accounting, prefix and RAM caches, checkpoints, speculative decoding."""
