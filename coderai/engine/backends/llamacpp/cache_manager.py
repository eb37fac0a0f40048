"""The KV cache of one batched context: which cells are promised to whom (kv.py), which
finished sequences' cells are kept as prefix entries (prefix_cache.py), the sequence ids
that name them, and the checkpoints of state that cannot be cut back (checkpoints.py).

Its life-cycle, as the planner drives it: `lookup` a prompt's longest usable prefix entry,
`reserve` cells (letting entries go, least recently used first, while that does not fit)
or `take_over` the entry's cells, `start_from` it, `grow` while running, and at the end
`finish` (the cells become an entry) or `retire` (they are freed). A promise that cannot
be made returns False (or None) and leaves the sequence's promise as it was (entries may
have been let go trying): the planner then waits, pauses or preempts. Every call into
llama.cpp goes through `SequenceMemory` (llama_memory.py).
"""

from __future__ import annotations

from collections.abc import Callable

from coderai.engine.backends.llamacpp.checkpoints import (
    Checkpoint,
    Held,
    Memory,
    due,
    latest,
    reusable,
    whole,
)
from coderai.engine.backends.llamacpp.kv import KvLedger, grown
from coderai.engine.backends.llamacpp.llama_memory import PARTIAL, SequenceMemory
from coderai.engine.backends.llamacpp.policy import CachePolicy
from coderai.engine.backends.llamacpp.prefix_cache import Hit, PrefixCache


class CacheManager:
    def __init__(
        self,
        policy: CachePolicy,
        memory: SequenceMemory,
        *,
        cells: int,
        parallel: int,
        entries: int,
        cache_tokens: int,
    ) -> None:
        """`cells` in the context, `parallel` running sequences, at most `entries` prefix
        entries (settings.BatchSettings.entries) holding at most `cache_tokens`."""
        self.policy = policy
        self.memory = memory
        self.ledger = KvLedger(cells)
        self.prefixes = PrefixCache(cache_tokens, entries, self.ledger.cost)
        #: a sequence id per running sequence and per entry (the scratch id is the next)
        self._free_ids = list(range(parallel + entries - 1, -1, -1))
        #: checkpoints of partial state, by sequence id (an entry keeps its sequence's)
        self.checkpoints: dict[int, list[Checkpoint]] = {}
        self.restored = 0
        #: told of a prefix entry a sequence has started from, as it is let go: its id,
        #: its tokens and how many of them the sequence shares (the host tier saves the
        #: rest, another conversation's turns, for that conversation's next one)
        self.on_let_go: Callable[[int, list[int], int], object] | None = None

    # -- sequence ids ------------------------------------------------------------------------
    def new_id(self) -> int:
        return self._free_ids.pop()

    def clear(self, seq_id: int) -> None:
        """Free what a sequence id holds in the cache and in the ledger; the id stays in
        use. Cells it shares with another sequence stay, held by that one."""
        self.memory.drop(seq_id)
        self.ledger.release(seq_id)
        self.checkpoints.pop(seq_id, None)

    def retire(self, seq_id: int) -> None:
        """Clear a sequence id and give it back."""
        self.clear(seq_id)
        self._free_ids.append(seq_id)

    # -- room ----------------------------------------------------------------------------------
    def promised(self, seq_id: int) -> int:
        return self.ledger.promised(seq_id)

    def reserve(self, seq_id: int, cells: int, keep: int | None = None) -> bool:
        """Promise a sequence `cells`, letting prefix entries (but `keep`) go while that
        does not fit; False (its promise as it was) if it does not fit with none left."""
        while not self.ledger.reserve(seq_id, cells):
            if not self.evict_one(keep):
                return False
        return True

    def will_share(self, seq_id: int, hit: Hit) -> None:
        """A sequence will start from an entry: where cells are shared, only what it adds
        to them counts against the room (`reserve` next)."""
        if self.policy.shares_cells:
            self.ledger.share(seq_id, *hit)

    def withdraw(self, seq_id: int) -> None:
        """A sequence not admitted after all: its promise, and what it was to share, go."""
        self.ledger.release(seq_id)

    def grow(self, seq_id: int, need: int, step: int) -> bool:
        """Promise a running sequence `step` more cells (never past `need`)."""
        held = self.ledger.promised(seq_id)
        more = grown(held, need, step)
        return more > held and self.reserve(seq_id, more)

    def evict_one(self, keep: int | None = None) -> bool:
        """Let the least recently used prefix entry (but `keep`) go; False if none is."""
        entry = self.prefixes.evict(keep)
        if entry is None:
            return False
        self.retire(entry)
        return True

    # -- prefix entries ----------------------------------------------------------------------
    def lookup(self, tokens: list[int], *, touch: bool = True) -> Hit | None:
        """The entry whose state gives the most of a prompt, and how many tokens (made the
        most recently used unless `touch` is False: prefix_cache.match)."""
        if self.policy.memory is Memory.FULL:
            return self.prefixes.match(tokens, touch=touch)
        return self.prefixes.match(tokens, self._usable, touch=touch)

    def _usable(self, seq_id: int, common: int) -> int:
        taken = [c.tokens for c in self.checkpoints.get(seq_id, ())]
        p = self.policy
        return reusable(common, self.memory.held(seq_id), p.memory, p.sliding_window, taken)[0]

    def start_from(self, entry: int, seq_id: int, tokens: int) -> int:
        """Give a sequence the first `tokens` tokens of a prefix entry's cells: full-attention
        cells are shared, and where the entry's window or recurrent state does not cover
        that prefix, the checkpoint taken there is restored. The tokens it now holds:
        `tokens`, or 0 where no checkpoint serves (it reads its prompt from the start)."""
        held = self.memory.held(entry) if self.policy.memory is not Memory.FULL else None
        self.memory.copy(entry, seq_id, 0, tokens)
        if self.policy.shares_cells:
            self.ledger.share(seq_id, entry, tokens)
        if held is not None and not self.complete(
            seq_id, tokens, held, self.checkpoints.get(entry, [])
        ):
            return 0
        return tokens

    def complete(self, seq_id: int, tokens: int, held: Held, points: list[Checkpoint]) -> bool:
        """A sequence given the cells of another's first `tokens` tokens, whose window or
        recurrent state reached `held` there: it keeps the checkpoints up to `tokens`, and
        where that state does not cover them the checkpoint taken there is restored. False
        (its cells let go, its promise kept) where none is, or it cannot be restored."""
        self.checkpoints[seq_id] = [c for c in points if c.tokens <= tokens]
        if whole(tokens, held, self.policy.memory, self.policy.sliding_window):
            return True
        point = next((c for c in points if c.tokens == tokens), None)
        if point is not None and self._restore(seq_id, point):
            return True
        self.memory.drop(seq_id)
        self.checkpoints.pop(seq_id, None)
        return False

    def take_over(self, seq_id: int, hit: Hit, cells: int) -> int | None:
        """A sequence that does not fit beside the entry it starts from takes that entry's
        cells over instead of evicting it: they are its prompt's, and the entry's own hold
        is let go. A long prompt resent (an agent's next turn, as long as the context
        allows) so keeps its prefix. The tokens it holds then (`start_from`); None
        (nothing changed) if it does not fit even so."""
        trial = self.ledger.copy()
        if self.policy.shares_cells:
            trial.share(seq_id, hit.entry, hit.tokens)
        trial.release(hit.entry)
        if not trial.reserve(seq_id, cells):
            return None
        holds = self.start_from(hit.entry, seq_id, hit.tokens)
        self.let_go(hit.entry, hit.tokens)
        reserved = self.ledger.reserve(seq_id, cells)
        assert reserved, "the entry's cells were counted as room"
        return holds

    def let_go(self, entry: int, shared: int) -> None:
        """An entry a sequence has started from is no longer kept: its id's hold is freed,
        the `shared` cells stay, held by that sequence (`on_let_go` hears of it first)."""
        if self.on_let_go is not None:
            self.on_let_go(entry, self.prefixes.tokens_of(entry), shared)
        self.prefixes.take(entry)
        self.retire(entry)

    def finish(self, seq_id: int, tokens: list[int]) -> None:
        """A finished sequence's cells become a prefix entry holding `tokens` (its promise
        shrinks to them); entries it makes useless, or it if it is over the bounds, go."""
        self.ledger.reserve(seq_id, len(tokens))
        for gone in self.prefixes.add(seq_id, tokens):
            self.retire(gone)
        while self.prefixes.over() and self.evict_one():
            pass

    # -- checkpoints -------------------------------------------------------------------------
    def checkpoint_due(self, seq_id: int, tokens: int, prompt: int) -> bool:
        if not self.policy.checkpoints:
            return False
        taken = [c.tokens for c in self.checkpoints.get(seq_id, ())]
        return due(tokens, prompt, taken, self.policy.checkpoint_every)

    def checkpoint(self, seq_id: int, tokens: int) -> None:
        """Save a sequence's partial state after its first `tokens` tokens."""
        data = self.memory.read_state(seq_id, PARTIAL)
        if data is None:
            return
        taken = self.checkpoints.get(seq_id, [])
        point = Checkpoint(tokens, data)
        self.checkpoints[seq_id] = latest([*taken, point], self.policy.checkpoints)

    def _restore(self, seq_id: int, point: Checkpoint) -> bool:
        read = self.memory.write_state(seq_id, point.data, PARTIAL)
        self.restored += read
        return read

    def stats(self) -> dict[str, int]:
        points = [p for c in self.checkpoints.values() for p in c]
        return {
            "kv_reserved": self.ledger.reserved,
            "kv_cells": self.ledger.cells,
            "prefix_hits": self.prefixes.hits,
            "prefix_tokens": self.prefixes.reused,
            "prefix_cached": self.prefixes.tokens,
            "checkpoints": len(points),
            "checkpoint_bytes": sum(len(p.data) for p in points),
            "checkpoints_restored": self.restored,
        }
