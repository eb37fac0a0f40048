"""What the backend decides for a batched instance when it loads a model (backend.py), in
one frozen object: the batch's shape, its prefix cache, checkpoints, host RAM and
speculation."""

from __future__ import annotations

from dataclasses import dataclass

#: the fewest prompt tokens read in a step while others decode (and before any is
#: measured); also the fewest tokens worth copying from a leader or saving as a tail
MIN_CHUNK = 16


@dataclass(frozen=True)
class BatchSettings:
    #: sequences decoding at once
    parallel: int
    #: completion tokens promised at a time to a request without max_tokens (kv.py)
    reserve_step: int
    #: the most tokens kept prefixes may hold (0: no prefix cache)
    cache_tokens: int
    #: seconds a step that reads a prompt may take while others decode
    prefill_step: float
    #: checkpoints of window or recurrent state kept per sequence, and the prompt tokens
    #: between two (checkpoints.py)
    checkpoints: int = 0
    checkpoint_every: int = 4096
    #: whether window layers keep all their cells (llama.cpp's swa_full)
    swa_full: bool = True
    flash: bool = True
    #: host RAM for prompt state the KV cache lets go (0: none; ram_cache.py)
    ram_bytes: int = 0
    #: n-gram drafts (a draft model is passed on its own: it is a loaded thing)
    speculative: bool = False
    #: a draft length fixed by the model entry, else chosen from step costs
    draft_length: int | None = None

    @property
    def entries(self) -> int:
        """Prefix entries at most: one per running sequence, each under a sequence id of
        its own (the ids, and the scratch one past them, follow from this); none without a
        prefix cache."""
        return self.parallel if self.cache_tokens else 0
