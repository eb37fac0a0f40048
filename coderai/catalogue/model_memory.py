"""The memory a model takes once loaded, before it is loaded: pure arithmetic over its
GGUF metadata (gguf_header.py) or its transformers config, with the same defaults the
engines load with (the llama.cpp backend imports its constants and its context choice from
here). Used by `coderai models estimate ID` and the console's Models page.

A llama.cpp load allocates (each logged by llama.cpp as a "buffer size"):
- the weights: the GGUF's size (all its parts);
- the KV cache: per token, layers x KV heads x (key + value dims) x the cache type's bytes,
  for `n_ctx` cells; a sliding-window layer keeps only `window x sequences + batch` cells
  (rounded up to 256) unless `swa_full`;
- the output buffer: the vocabulary's logits for each sequence;
- the compute buffer: the larger of a batch's logits (batch x vocabulary) and its attention
  (the mask, batch x context, and without flash attention the scores, batch x context x
  heads), plus the feed-forward's activations.
Fitted to llama.cpp 0.3.36's own figures for SmolLM2 135M and Gemma 3 270M, within 1-4 %;
tests/integration/catalogue/test_model_memory.py holds it to 15 % of a real load's.
What the estimate leaves out: a GPU backend's own workspace (CUDA's context, cuBLAS), and
the prompt cache in RAM, which grows with use up to its own cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: the KV cache's bytes per value, by its type: a q8_0 block holds 32 values in 34 bytes,
#: a q4_0 block in 18
KV_BYTES = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
#: the smallest context made when memory is short
CONTEXT_FLOOR = 2048
#: of the memory available at load, the share a model's KV cache may take by default
KV_SHARE = 0.25
#: sequences one context runs at once, by default
PARALLEL_CPU, PARALLEL_GPU = 4, 16
#: tokens one step reads at most (llama.cpp's n_batch and n_ubatch)
N_BATCH = 512
#: the most sequences a llama.cpp context holds (LLAMA_MAX_SEQ)
MAX_SEQUENCES = 256
#: one sliding-window layer in every N, where the metadata does not say (llama.cpp's own
#: table: Gemma 3 has five window layers to each full one)
_WINDOW_PATTERN = {"gemma3": 6, "gemma3n": 5, "gemma2": 2, "cohere2": 4, "gpt-oss": 2,
                   "llama4": 4}  # fmt: skip
_CELL_PAD = 256


def _number(meta: Mapping[str, object], key: str, default: int = 0) -> int:
    """A scalar count; a per-layer array's largest (the default where there is none)."""
    found = _per_layer(meta, key, 0)
    return max(found) if found else default


def _per_layer(meta: Mapping[str, object], key: str, layers: int) -> list[int]:
    """A value the metadata gives once or per layer (a tuple from gguf_header, or the text
    "[8, 8, 0]" as llama.cpp's own metadata call writes an array), as one value per layer
    ([] where it is not given, or not a count)."""
    value = meta.get(key)
    if isinstance(value, str) and value.startswith("["):
        parts = [p.strip() for p in value.strip("[]").split(",") if p.strip()]
        value = tuple(int(p) for p in parts if p.isdigit()) if parts else ()
    if isinstance(value, tuple):
        return [int(v) for v in value]
    if value is None or isinstance(value, float) or not str(value).isdigit():
        return []
    return [int(str(value))] * max(layers, 1)


def bytes_per_token(metadata: Mapping[str, object], element_bytes: float) -> int:
    """KV cache bytes one token takes in every layer, from a GGUF's metadata (0 when it
    does not say); `element_bytes` is fractional for a quantized cache. A per-layer KV
    head count (a model whose layers differ) is summed over its layers."""
    arch = str(metadata.get("general.architecture", "llama"))
    layers = _number(metadata, f"{arch}.block_count")
    heads = _number(metadata, f"{arch}.attention.head_count")
    kv_heads = _per_layer(metadata, f"{arch}.attention.head_count_kv", layers) or [heads] * layers
    head_dim = _number(metadata, f"{arch}.embedding_length") // heads if heads else 0
    keys = _number(metadata, f"{arch}.attention.key_length", head_dim)
    values = _number(metadata, f"{arch}.attention.value_length", head_dim)
    return round(sum(kv_heads[:layers]) * (keys + values) * element_bytes)


def context_for_memory(trained: int, bytes_per_token: int, allowance: int, floor: int) -> int:
    """The context to create: the model's trained context as far as its KV cache fits
    `allowance` bytes, and never below `floor` tokens (a context too small to answer
    anything helps nobody; a load that then does not fit fails with llama.cpp's error)."""
    if bytes_per_token <= 0:
        return trained
    fits = allowance // bytes_per_token
    return max(min(trained, floor), min(trained, fits))


def sequences(options: Mapping[str, Any], on_gpu: bool) -> tuple[int, int]:
    """(sequences run at once, sequence ids of the context): one id per running sequence
    and per kept prefix, and a scratch one, as the llama.cpp backend makes them."""
    parallel = int(options.get("parallel") or (PARALLEL_GPU if on_gpu else PARALLEL_CPU))
    kept = int(options.get("prefix_cache_tokens", 1)) != 0
    ids = parallel * 2 + 1 if kept else parallel
    if kept and ids == MAX_SEQUENCES + 1:
        ids -= 1  # no scratch id: whole states are saved
    return parallel, ids


@dataclass(frozen=True)
class Estimate:
    context: int
    trained: int
    weights: int
    kv: int
    compute: int
    #: where it is to be loaded, and the bytes free there
    where: str
    room: int
    #: the largest context whose load fits the room (0: not even the smallest)
    largest_context: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute

    @property
    def fits(self) -> bool:
        return self.total <= self.room

    def public(self) -> dict[str, Any]:
        return {**asdict(self), "total": self.total, "fits": self.fits}


@dataclass(frozen=True)
class _Gguf:
    """What a llama.cpp context costs, by its size in tokens."""

    weights: int
    layer_bytes: float  # KV bytes per token in one layer
    full_layers: int
    window_layers: int
    window: int
    vocab: int
    heads: int
    feed_forward: int
    sequences: int
    batch: int
    flash: bool
    swa_full: bool

    def kv(self, n_ctx: int) -> int:
        cells = n_ctx
        if self.window_layers and not self.swa_full:
            wanted = self.window * self.sequences + self.batch
            cells = min(n_ctx, -(-wanted // _CELL_PAD) * _CELL_PAD)
        return round(self.layer_bytes * (self.full_layers * n_ctx + self.window_layers * cells))

    def compute(self, n_ctx: int) -> int:
        logits = self.batch * self.vocab * 4
        # the mask over the context (f16 for flash attention), and without flash the
        # scores of every head (f32)
        mask = self.batch * n_ctx * (2 if self.flash else 4)
        attention = mask + (0 if self.flash else self.batch * n_ctx * self.heads * 4)
        activations = self.batch * self.feed_forward * 4 * 2
        output = self.vocab * 4 * self.sequences
        return max(logits, attention) + activations + output

    def total(self, n_ctx: int) -> int:
        return self.weights + self.kv(n_ctx) + self.compute(n_ctx)


def largest_context(cost: Any, trained: int, room: int) -> int:
    """The largest context (a multiple of 256, at most `trained`) whose `cost(n_ctx)` fits
    `room`; 0 if none does. `cost` grows with the context."""
    low, high = 0, trained // _CELL_PAD
    while low < high:
        middle = (low + high + 1) // 2
        if cost(middle * _CELL_PAD) <= room:
            low = middle
        else:
            high = middle - 1
    if low == trained // _CELL_PAD and trained % _CELL_PAD and cost(trained) <= room:
        return trained
    return low * _CELL_PAD


def _window_layers(meta: Mapping[str, object], arch: str, layers: int) -> int:
    """How many layers keep only a sliding window: as the metadata says (a per-layer
    array of flags, or one layer in N), else llama.cpp's table for the architecture."""
    if not _number(meta, f"{arch}.attention.sliding_window"):
        return 0
    key = f"{arch}.attention.sliding_window_pattern"
    value = meta.get(key)
    if isinstance(value, tuple):
        return sum(1 for flag in value[:layers] if flag)
    pattern = _number(meta, key) or _WINDOW_PATTERN.get(arch, 1)
    return layers - layers // pattern if pattern > 1 else 0


def for_gguf(meta: Mapping[str, object], weights: int, options: Mapping[str, Any],
             on_gpu: bool, allowance: int, room: int, where: str) -> Estimate:  # fmt: skip
    """A GGUF load with the entry's options. `allowance` is the host RAM available, of which
    the engine gives an unset context's KV cache a share (as the llama.cpp backend sizes
    it, wherever the model then goes); `room` is the free memory where it loads."""
    arch = str(meta.get("general.architecture", "llama"))
    kv_type = str(options.get("kv_cache", "f16"))
    per_token = bytes_per_token(meta, KV_BYTES.get(kv_type, 2.0))
    layers = _number(meta, f"{arch}.block_count")
    window = _number(meta, f"{arch}.attention.sliding_window")
    windowed = _window_layers(meta, arch, layers)
    full = layers - windowed
    trained = _number(meta, f"{arch}.context_length", 4096)
    _, ids = sequences(options, on_gpu)
    quantized = kv_type in ("q8_0", "q4_0")
    flash = bool(options.get("flash_attn", on_gpu or quantized or bool(window)))
    model = _Gguf(
        weights=weights,
        layer_bytes=per_token / layers if layers else 0.0,
        full_layers=full,
        window_layers=windowed,
        window=window,
        vocab=_number(meta, f"{arch}.vocab_size") or _number(meta, "tokenizer.ggml.tokens"),
        heads=_number(meta, f"{arch}.attention.head_count"),
        feed_forward=_number(meta, f"{arch}.feed_forward_length"),
        sequences=ids,
        batch=int(options.get("n_batch") or N_BATCH),
        flash=flash,
        swa_full=bool(options.get("swa_full", False)),
    )
    n_ctx = int(options.get("n_ctx") or 0) or context_for_memory(
        trained, per_token, int(allowance * KV_SHARE), CONTEXT_FLOOR
    )
    return Estimate(n_ctx, trained, weights, model.kv(n_ctx), model.compute(n_ctx), where,
                    room, largest_context(model.total, trained, room))  # fmt: skip


_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def for_transformers(config: Mapping[str, Any], weights: int, options: Mapping[str, Any],
                     on_gpu: bool, room: int, where: str) -> Estimate:  # fmt: skip
    """A transformers load: its weights in the dtype the backend loads them in (the
    entry's, else 16-bit on a card and float32 on the CPU), the KV cache of one sequence
    at the model's whole context (transformers grows it as the sequence does), and a
    chunk's logits."""
    text = config.get("text_config") or config
    stored = _DTYPE_BYTES.get(str(config.get("torch_dtype") or config.get("dtype")), 0)
    wanted = _DTYPE_BYTES.get(str(options.get("dtype") or ("bfloat16" if on_gpu else "float32")))
    if stored and wanted:
        weights = weights * wanted // stored
    element = wanted or stored or 2
    layers = int(text.get("num_hidden_layers") or 0)
    heads = int(text.get("num_attention_heads") or 0)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or (int(text.get("hidden_size") or 0) // heads if heads
                                             else 0))  # fmt: skip
    per_token = 2 * layers * kv_heads * head_dim * element
    trained = int(text.get("max_position_embeddings") or 4096)
    n_ctx = int(options.get("n_ctx") or 0) or trained
    vocab = int(text.get("vocab_size") or 0)

    def cost(context: int) -> int:
        return weights + per_token * context + N_BATCH * vocab * 4

    compute = N_BATCH * vocab * 4
    return Estimate(n_ctx, trained, weights, per_token * n_ctx, compute, where, room,
                    largest_context(cost, trained, room))  # fmt: skip
