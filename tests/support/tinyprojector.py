"""A tiny vision projector built offline: the `mmproj` GGUF that llama.cpp's multimodal
library (mtmd) loads beside a language model, so the vision path is tested with no model
downloaded. It is LLaVA's shape (projector type `mlp`): a one-block vision transformer
over 8x8 patches of a 32x32 image (16 image tokens), then a two-layer MLP into the
language model's embedding width. Its weights are random: it proves that an image
reaches the model and takes its tokens, not what a picture shows.

The keys and tensor names are llama.cpp's for CLIP (tools/mtmd/clip-impl.h); measured
with llama-cpp-python 0.3.36: mtmd_init_from_file loads it with the tiny model of
tinymodel.py, and a prompt with one image is tokenized into text, 16 image tokens, text.
"""

from __future__ import annotations

from pathlib import Path

#: the image side, the patch side, the encoder's width and its MLP's
IMAGE, PATCH, WIDTH, FEED_FORWARD = 32, 8, 32, 64
#: image tokens one picture becomes (one per patch)
IMAGE_TOKENS = (IMAGE // PATCH) ** 2


def build_projector(path: Path, embedding: int, seed: int = 0) -> Path:
    """Write the projector for a language model `embedding` wide to `path`."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", "mlp")
    writer.add_bool("clip.use_gelu", True)
    for key, value in (("image_size", IMAGE), ("patch_size", PATCH), ("embedding_length", WIDTH),
                       ("feed_forward_length", FEED_FORWARD), ("projection_dim", embedding),
                       ("block_count", 1), ("attention.head_count", 2)):  # fmt: skip
        writer.add_uint32(f"clip.vision.{key}", value)
    writer.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    writer.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    writer.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    rng = np.random.default_rng(seed)

    def add(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))

    add("v.patch_embd.weight", WIDTH, 3, PATCH, PATCH)
    add("v.class_embd", WIDTH)
    add("v.position_embd.weight", IMAGE_TOKENS + 1, WIDTH)  # and the class token's
    add("v.pre_ln.weight", WIDTH)
    add("v.pre_ln.bias", WIDTH)
    for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
        add(f"v.blk.0.{name}.weight", WIDTH, WIDTH)
        add(f"v.blk.0.{name}.bias", WIDTH)
    for name in ("ln1", "ln2"):
        add(f"v.blk.0.{name}.weight", WIDTH)
        add(f"v.blk.0.{name}.bias", WIDTH)
    add("v.blk.0.ffn_up.weight", FEED_FORWARD, WIDTH)
    add("v.blk.0.ffn_up.bias", FEED_FORWARD)
    add("v.blk.0.ffn_down.weight", WIDTH, FEED_FORWARD)
    add("v.blk.0.ffn_down.bias", WIDTH)
    add("mm.0.weight", embedding, WIDTH)  # LLaVA's MLP: linear, GELU, linear
    add("mm.0.bias", embedding)
    add("mm.2.weight", embedding, embedding)
    add("mm.2.bias", embedding)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
