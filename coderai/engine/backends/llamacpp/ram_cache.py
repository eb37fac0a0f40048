"""Prompt state kept in host RAM: the prefixes the KV cache lets go, for a later prompt.

A coding agent resends its whole conversation every turn; with more agents than the KV
cache keeps prefixes for, they evict each other's and each turn reads all again. When a
kept prefix must go (the KV cache needs its cells), or a sequence is preempted, the
backend saves its state here (`llama_state_seq_get_data_ext`): bytes, the tokens they
hold, how far its window state reaches and its checkpoints. A new prompt that begins with
a saved one's tokens has it restored into its sequence instead of reading them.

Pure bookkeeping, bounded in bytes, least recently used out first; the backend moves the
bytes in and out of llama.cpp.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from coderai.engine.backends.llamacpp.checkpoints import Checkpoint, Held
from coderai.engine.backends.llamacpp.prefix_cache import common_prefix
from coderai.engine.holdings import lead_of


@dataclass(frozen=True, eq=False)
class Saved:
    """One sequence's state as llama.cpp wrote it."""

    tokens: list[int]
    data: bytes | bytearray  #: bytearray as the engine writes it (read in place)
    held: Held
    checkpoints: list[Checkpoint] = field(default_factory=list)
    #: the first position its cells hold: the cells before it stayed in the KV cache,
    #: shared with another sequence, and were not saved; it serves only a sequence that
    #: has its first `start` tokens already
    start: int = 0

    @property
    def size(self) -> int:
        return len(self.data) + sum(len(c.data) for c in self.checkpoints)

    @functools.cached_property
    def lead(self) -> int | None:
        """Its prompt's lead (engine/holdings.py). A tail's too: it is saved only while
        its head stays in the KV cache or is saved as well."""
        return lead_of(self.tokens)


class RamHit(NamedTuple):
    """A saved state a prompt can go on from, and how many of its tokens it gives."""

    saved: Saved
    tokens: int


class RamCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, Saved] = OrderedDict()
        self._keys = 0
        self.bytes = 0
        self.saves = 0
        self.hits = 0
        self.restored_tokens = 0
        self.restore_ms = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, saved: Saved) -> bool:
        """Keep a sequence's state, if it fits the bound; saved states whose tokens it
        begins with go (it holds all they do), then the least recently used while the
        bound is passed. False if it is larger than the bound."""
        if saved.size > self.max_bytes or not saved.tokens:
            return False
        for key, old in list(self._entries.items()):
            if (
                common_prefix(old.tokens, saved.tokens) == len(old.tokens)
                and saved.start <= old.start
                and not self._heads_a_tail(old)
            ):
                self._drop(key)
        self._keys += 1
        self._entries[self._keys] = saved
        self.bytes += saved.size
        self.saves += 1
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def _heads_a_tail(self, state: Saved) -> bool:
        """Whether a saved tail begins where this state, saved from the start, ends: it
        stays beside a larger state holding it too, since restoring it costs less."""
        n = len(state.tokens)
        return state.start == 0 and any(
            tail.start == n and common_prefix(tail.tokens, state.tokens) == n
            for tail in self._entries.values()
        )

    def match(
        self, tokens: list[int], usable: Callable[[Saved, int], int], fits: int
    ) -> RamHit | None:
        """The saved state that gives the most of `tokens` (at most all but the last,
        whose logits are needed) and holds no more than `fits` cells (a restore writes
        all of its cells before the ones past the shared prefix are let go), and how many
        it gives; `usable` says how many of n shared tokens a state can give
        (checkpoints.reusable; 0 for one whose `start` the sequence does not have)."""
        best: tuple[int, int] | None = None
        for key, saved in self._entries.items():
            if len(saved.tokens) - saved.start > fits:
                continue
            shared = min(common_prefix(saved.tokens, tokens), len(tokens) - 1)
            gives = usable(saved, shared) if shared > 0 else 0
            if gives > 0 and (best is None or (gives, -saved.size) > self._rank(*best)):
                best = (key, gives)
        if best is None:
            return None
        self._entries.move_to_end(best[0])
        return RamHit(self._entries[best[0]], best[1])

    def _rank(self, key: int, gives: int) -> tuple[int, int]:
        """Of two states that give as many tokens, the smaller is restored sooner."""
        return gives, -self._entries[key].size

    def leads(self) -> set[int]:
        """The leads of the states it keeps (engine/holdings.py)."""
        return {lead for s in self._entries.values() if (lead := s.lead) is not None}

    def holds(self, tokens: list[int], start: int) -> bool:
        """Whether this very state (these tokens, from `start`) is kept."""
        return any(s.start == start and s.tokens == tokens for s in self._entries.values())

    def covers(self, tokens: list[int], most: int) -> bool:
        """Whether a saved state from the start, of no more than `most` tokens, holds all
        of `tokens` (a sequence that has none of their cells can be given them at little
        cost)."""
        return any(
            saved.start == 0
            and len(saved.tokens) <= most
            and common_prefix(saved.tokens, tokens) == len(tokens)
            for saved in self._entries.values()
        )

    def continues(self, tokens: list[int], have: int, end: int) -> bool:
        """Whether a saved state that begins past `have` and by `end` holds more of
        `tokens`: restoring up to `end` leads on to it (a conversation's own tail saved
        past a prefix it shared)."""
        return any(
            have < saved.start <= end and common_prefix(saved.tokens, tokens) > end
            for saved in self._entries.values()
        )

    def count_hit(self, tokens: int, ms: int) -> None:
        self.hits += 1
        self.restored_tokens += tokens
        self.restore_ms += ms

    def _drop(self, key: int) -> None:
        self.bytes -= self._entries.pop(key).size
