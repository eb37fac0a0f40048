"""The memory estimate's arithmetic (model_memory.py) and the GGUF header skim it reads
(gguf_header.py), on metadata written here: the figures llama.cpp 0.3.36 logged for
Gemma 3 270M on this machine (its KV buffers of 96 and 75 MiB at a 32k context, 9
sequences, the window layers at 5,120 cells), per-layer arrays, and headers that are
cut, nested or lying about their lengths."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest

from coderai.catalogue import entry_estimate, gguf_header, model_memory
from coderai.catalogue.entries import ModelEntry
from coderai.errors import ModelFileError, NotAFileOrFolder

MIB = 1 << 20
#: Gemma 3 270M's own metadata (read from its GGUF), as the skim returns it
GEMMA = {
    "general.architecture": "gemma3", "gemma3.context_length": 32768,
    "gemma3.embedding_length": 640, "gemma3.block_count": 18,
    "gemma3.feed_forward_length": 2048, "gemma3.attention.head_count": 4,
    "gemma3.attention.key_length": 256, "gemma3.attention.value_length": 256,
    "gemma3.attention.sliding_window": 512, "gemma3.attention.head_count_kv": 1,
    "tokenizer.ggml.tokens": 262144,
}  # fmt: skip


def test_a_windowed_models_kv_cache_is_counted_as_llamacpp_keeps_it() -> None:
    found = model_memory.for_gguf(GEMMA, 253_113_024, {}, False, 20 << 30, 20 << 30, "RAM")
    assert found.context == 32768
    assert found.kv == (96 + 75) * MIB  # 3 full layers at 32,768 cells, 15 at 5,120
    full = model_memory.for_gguf(GEMMA, 1, {"swa_full": True}, False, 20 << 30, 20 << 30, "x")
    assert full.kv == (96 + 480) * MIB  # llama.cpp's figures with swa_full
    assert found.compute == pytest.approx(514.5 * MIB, rel=0.05)


def test_per_layer_head_counts_are_summed_over_the_layers() -> None:
    meta: dict[str, Any] = {"general.architecture": "llama", "llama.block_count": 4,
                            "llama.attention.head_count": 8, "llama.embedding_length": 512,
                            "llama.attention.head_count_kv": (2, 2, 0, 4)}  # fmt: skip
    assert model_memory.bytes_per_token(meta, 2) == (2 + 2 + 0 + 4) * (64 + 64) * 2
    # as llama.cpp's own metadata call writes an array (the engine reads that)
    as_text = {**meta, "llama.attention.head_count_kv": "[2, 2, 0, 4]"}
    assert model_memory.bytes_per_token(as_text, 2) == (2 + 2 + 0 + 4) * (64 + 64) * 2


def test_a_per_layer_window_pattern_names_the_window_layers() -> None:
    meta = {**GEMMA, "gemma3.attention.sliding_window_pattern": (True,) * 12 + (False,) * 6}
    found = model_memory.for_gguf(meta, 1, {"n_ctx": 32768}, False, 1 << 40, 1 << 40, "x")
    assert found.kv == 6 * 32768 * 1024 + 12 * 5120 * 1024


def test_an_unset_context_is_sized_from_host_ram_not_from_the_room() -> None:
    """As the engine sizes it: a quarter of the host's available RAM, whatever the room
    (a card's VRAM) is; the room then says whether that fits."""
    found = model_memory.for_gguf(GEMMA, 1, {}, True, 20 << 30, 800 * MIB, "VRAM")
    assert found.context == 32768
    assert not found.fits and 0 < found.largest_context < 32768


def test_a_transformers_model_counts_the_dtype_it_loads_in() -> None:
    config = {"torch_dtype": "bfloat16", "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "hidden_size": 64, "max_position_embeddings": 512,
              "vocab_size": 100}  # fmt: skip
    cpu = model_memory.for_transformers(config, 1000, {}, False, 1 << 30, "RAM")
    gpu = model_memory.for_transformers(config, 1000, {}, True, 1 << 30, "VRAM")
    assert (cpu.weights, gpu.weights) == (2000, 1000)  # float32 on the CPU, bf16 on a card
    assert cpu.kv == 2 * 2 * 2 * 16 * 4 * 512
    chosen = model_memory.for_transformers(config, 1000, {"dtype": "float16"}, False, 1 << 30, "x")
    assert chosen.weights == 1000


def gguf(*pairs: tuple[str, int, bytes], keys: int | None = None) -> bytes:
    """A GGUF header: each pair's key, type and encoded value."""
    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs) if keys is None else keys)
    for key, kind, value in pairs:
        out += struct.pack("<Q", len(key)) + key.encode() + struct.pack("<I", kind) + value
    return out


def text(s: str) -> bytes:
    return struct.pack("<Q", len(s)) + s.encode()


def test_the_skim_reads_scalars_small_number_arrays_and_the_length_of_others(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.gguf"
    tokens = struct.pack("<IQ", 8, 3) + text("a") + text("bb") + text("c")
    path.write_bytes(gguf(
        ("general.architecture", 8, text("llama")), ("llama.block_count", 4, struct.pack("<I", 2)),
        ("llama.rope.freq_base", 6, struct.pack("<f", 0.5)),
        ("llama.attention.head_count_kv", 9, struct.pack("<IQii", 5, 2, 4, 8)),
        ("tokenizer.ggml.tokens", 9, tokens),
    ))  # fmt: skip
    assert gguf_header.read(path) == {
        "general.architecture": "llama", "llama.block_count": 2, "llama.rope.freq_base": 0.5,
        "llama.attention.head_count_kv": (4, 8), "tokenizer.ggml.tokens": 3,
    }  # fmt: skip


@pytest.mark.parametrize(
    "data",
    [
        b"GGUF" + struct.pack("<I", 3),  # cut in the counts
        gguf(("a", 4, b"\x01")),  # cut in a value
        gguf(("a", 9, struct.pack("<IQ", 4, 1 << 40))),  # an array past the file's end
        gguf(("a", 9, struct.pack("<IQ", 8, 1 << 40) + text("x"))),  # a string array, too
        gguf(("a", 9, struct.pack("<IQ", 9, 1) * 5000)),  # nested 5,000 deep
        gguf(("a", 99, b"")),  # no such type
        gguf(keys=1 << 40),  # a key count no model has
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 40),  # a huge key
        b"GGML" + bytes(20),
    ],
)
def test_a_header_that_is_not_whole_is_refused_quickly(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(gguf_header.NotGguf):
        gguf_header.read(path)


def test_an_entry_whose_path_is_no_file_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)  # opening it would wait for a writer
    entry = ModelEntry(id="m", path=str(fifo), format="gguf")
    with pytest.raises(NotAFileOrFolder, match="neither a file nor a folder"):
        entry_estimate.estimate(entry, 1 << 30, False, "RAM")


def test_a_split_model_missing_a_part_is_refused_naming_it(tmp_path: Path) -> None:
    first = tmp_path / "m-00001-of-00002.gguf"
    first.write_bytes(gguf(("general.architecture", 8, text("llama"))))
    entry = ModelEntry(id="m", path=str(first), format="gguf")
    with pytest.raises(ModelFileError, match=r"missing m-00002-of-00002\.gguf"):
        entry_estimate.estimate(entry, 1 << 30, False, "RAM")
    (tmp_path / "m-00002-of-00002.gguf").write_bytes(b"x" * 1000)
    assert (
        entry_estimate.estimate(entry, 1 << 30, False, "RAM").weights == 1000 + first.stat().st_size
    )
