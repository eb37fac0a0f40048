"""KV cache accounting for many sequences sharing one context: pure decisions, no llama.cpp.

A sequence is admitted only with cells promised to it (a reservation), so one sequence's
growth can never take the cells another needs to finish: a running sequence is never cut
short or corrupted because another filled the cache. A request that sets max_tokens
reserves all it can use at once; one that does not reserves `step` completion tokens at a
time and grows while it runs.
"""

from __future__ import annotations


def cells_needed(prompt: int, limit: int) -> int:
    """The most cells a sequence can ever use: its prompt and a completion of `limit`
    tokens, less the last token sampled, which is never decoded."""
    return prompt + max(0, limit - 1)


def reservation(tokens: int, need: int, bounded: bool, step: int) -> int:
    """Cells to promise a sequence on admission, with `tokens` known (its prompt, and its
    completion so far after a preemption): all it can need when the request bounded its
    length (max_tokens), else `step` more than it knows."""
    return need if bounded else min(need, tokens + step)


def grown(reserved: int, need: int, step: int) -> int:
    """A sequence's next reservation when it has used all of it: `step` cells more, never
    beyond what it can ever need."""
    return min(need, reserved + step)


def bytes_per_token(metadata: dict[str, str], element_bytes: float) -> int:
    """KV cache bytes one token takes, from a GGUF's metadata (0 when it does not say);
    `element_bytes` is fractional for a quantized cache (q8_0: 34 bytes per 32 values)."""
    arch = metadata.get("general.architecture", "llama")

    def number(key: str, default: int = 0) -> int:
        value = metadata.get(f"{arch}.{key}")
        return int(value) if value is not None and str(value).isdigit() else default

    layers, heads = number("block_count"), number("attention.head_count")
    kv_heads = number("attention.head_count_kv", heads)
    head_dim = number("embedding_length") // heads if heads else 0
    keys = number("attention.key_length", head_dim)
    values = number("attention.value_length", head_dim)
    return round(layers * kv_heads * (keys + values) * element_bytes)


def context_for_memory(trained: int, bytes_per_token: int, allowance: int, floor: int) -> int:
    """The context to create: the model's trained context as far as its KV cache fits
    `allowance` bytes, and never below `floor` tokens (a context too small to answer
    anything helps nobody; a load that then does not fit fails with llama.cpp's error)."""
    if bytes_per_token <= 0:
        return trained
    fits = allowance // bytes_per_token
    return max(min(trained, floor), min(trained, fits))


class KvLedger:
    """Cells of one unified KV cache, promised to sequences by owner id."""

    def __init__(self, cells: int) -> None:
        self.cells = cells
        self.reserved = 0
        self._by_owner: dict[int, int] = {}

    def free(self) -> int:
        return self.cells - self.reserved

    def holds(self, owner: int) -> int:
        return self._by_owner.get(owner, 0)

    def reserve(self, owner: int, cells: int) -> bool:
        """Set an owner's reservation to `cells` if the cache has room; False if not."""
        change = cells - self.holds(owner)
        if change > self.free():
            return False
        self._by_owner[owner] = cells
        self.reserved += change
        return True

    def release(self, owner: int) -> None:
        self.reserved -= self._by_owner.pop(owner, 0)
