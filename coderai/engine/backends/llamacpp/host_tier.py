"""Prompt state in host RAM, below the KV cache: what the cache lets go is saved here
(ram_cache.py keeps the bytes) and restored when a prompt that begins with it comes back.

Four things are saved: a prefix entry evicted for room; a preempted sequence's cells; an
entry a sequence takes over or starts from and lets go, where it holds many tokens past
those the sequence shares (another conversation's turns); and, with `parks_idle`
(policy.py), the entries no waiting sequence would start from. Where part of a
sequence's cells can be saved alone (`saves_tails`), only those past the cells that stay
in the cache are (an agent's own turns after a system prompt others share: a few MB, not
the hundreds of the whole), copied through the scratch sequence; a recall then restores
a conversation's turns one by one, each into the scratch sequence, from where the cells
past those the sequence has are copied. A tail serves only a sequence that has the cells
before it, so where those are few (a chat template's and a default system prompt's, which
every new conversation shares with the last) and no saved state holds them, they are
saved too, on their own: the conversation comes back whoever holds them by then.
"""

from __future__ import annotations

import time

from coderai.engine.backends.llamacpp.cache_manager import CacheManager
from coderai.engine.backends.llamacpp.checkpoints import Held, Memory, reusable
from coderai.engine.backends.llamacpp.disk_cache import DiskCache
from coderai.engine.backends.llamacpp.llama_memory import WHOLE
from coderai.engine.backends.llamacpp.parking import Parking
from coderai.engine.backends.llamacpp.ram_cache import RamCache, Saved
from coderai.engine.backends.llamacpp.settings import MIN_CHUNK

#: the fewest tokens past a shared prefix for which an entry taken over is saved to host
#: RAM first, where its whole state is saved (reading fewer again costs less than copying
#: it all out); where only its cells past the shared ones are, MIN_CHUNK (fewer, such as
#: the one token a whole prefix taken over leaves, are read again at no cost)
RAM_TAIL = 256
#: cells saved per round when an instance goes (persist): its time bound is checked
#: between rounds
PERSIST_CELLS = 4096


def worth_taking(
    gained: int, held: int, per_token: float | None = None, per_cell: float | None = None
) -> bool:
    """Whether restoring a saved state that holds `held` cells, for the `gained` tokens a
    sequence need then not read, is worth it: where what reading a prompt token and
    copying a cell to or from RAM cost are measured (`per_token`, `per_cell` seconds),
    where the tokens not read cost more than the cells restored (on a 2-core CPU a token
    costs what some 400 cells do); before, for RAM_TAIL tokens or more, or for at least
    half of what it holds."""
    if per_token is not None and per_cell is not None:
        return gained * per_token >= held * per_cell
    return gained >= RAM_TAIL or 2 * gained >= held


class HostTier:
    def __init__(
        self, ram: RamCache, cache: CacheManager, parking: Parking, disk: DiskCache | None = None
    ) -> None:
        self.ram = ram
        #: every state RAM takes is written here too, and read back into RAM for a prompt
        #: it goes on (disk_cache.py); None: off
        self.disk = disk
        self.cache = cache
        #: what a prompt token and a cell's save cost, as measured (parking.py)
        self.parking = parking
        self.policy = cache.policy
        self.memory = cache.memory
        cache.prefixes.on_evict = self.save
        cache.on_let_go = self._entry_let_go
        #: bytes this round of parks may still save (park_idle)
        self.room = ram.max_bytes

    def save(self, seq_id: int, tokens: list[int], most: int | None = None) -> int:
        """Copy a sequence's state to host RAM before its cells are freed: where cells it
        shares stay in the cache (with its base, or another that shares them), only those
        past them, and where those staying are fewer than RAM_TAIL and no saved head
        holds them, those too, apart (after the tail, so that RAM, which lets the least
        recently used go first, keeps the head longer). The bytes saved: 0 if the state,
        or its tail, was not (all of it stays in the cache, or RAM did not take it, or it
        is over `most` bytes)."""
        start = self.cache.ledger.staying(seq_id) if self.policy.saves_tails else 0
        if start >= len(tokens):
            return 0
        bound = self.ram.max_bytes if most is None else min(self.ram.max_bytes, most)
        saved = self._save_cells(seq_id, tokens, start, -1, bound)
        if saved and 0 < start < RAM_TAIL and not self.ram.covers(tokens[:start], RAM_TAIL):
            saved += self._save_cells(seq_id, tokens[:start], 0, start, bound - saved)
        return saved

    def _save_cells(self, seq_id: int, tokens: list[int], start: int, end: int, bound: int) -> int:
        """Save a sequence's cells from `start` to `end` (-1: all past `start`; its
        `tokens` are those up to there), through the scratch sequence where that is not
        all of them; the bytes kept, 0 if none were (over `bound`, or RAM did not take
        them)."""
        source = seq_id
        if start > 0 or end >= 0:
            assert self.policy.scratch is not None
            source = self.policy.scratch
            self.memory.copy(seq_id, source, start, end)
        data = self.memory.read_state(source, WHOLE, bound) if bound > 0 else None
        held = self.memory.held(source)
        if source != seq_id:
            self.memory.drop(source)
        if data is None:
            return 0
        points = list(self.cache.checkpoints.get(seq_id, ()))
        if self.policy.memory is Memory.WINDOW:  # llama.cpp writes the cells the window sees
            held = Held(max(held.first, held.end - self.policy.sliding_window), held.end)
        saved = Saved(list(tokens), data, held, points, start)
        if not self.ram.put(saved):
            return 0
        if self.disk is not None:
            self.disk.save(saved)
        return saved.size

    def _entry_let_go(self, entry: int, tokens: list[int], shared: int) -> None:
        """An entry a sequence started from goes: where it held many more tokens than are
        shared (another agent's conversation beyond a common system prompt), it is saved
        first, for that conversation's next turn."""
        tail = len(tokens) - shared
        if tail >= RAM_TAIL or (tail >= MIN_CHUNK and self.policy.saves_tails):
            self.save(entry, tokens)

    def park_idle(self, busy: set[int], most: int | None = None) -> tuple[int, bool]:
        """Save the prefix entries but `busy` (those a waiting sequence would start from)
        and let them go, least recently used first, no more than `most` cells (one entry
        at least, whatever it holds). What RAM cannot hold beside what this round of
        parks saved stays (reading it again would cost more than the cells it keeps
        idle, and a save must not push out another just parked). The cells parked, and
        whether idle entries are left for a later step. The cells are those the saves
        copied (an entry's shared with a running sequence stay with it, unsaved)."""
        prefixes = self.cache.prefixes
        cells = 0
        for idle in [i for i in prefixes.ids() if i not in busy]:
            if self.room <= 0:
                return cells, False
            tokens = prefixes.tokens_of(idle)
            own = len(tokens) - self.cache.ledger.staying(idle)  # what a save copies
            if most is not None and cells and cells + own > most:
                return cells, True
            saved = self.save(idle, tokens, most=self.room)
            if saved:
                self.room -= saved
                cells += own
                prefixes.take(idle)
                self.cache.retire(idle)
        return cells, False

    def new_round(self) -> None:
        """A new round of parks: it may fill RAM again (park_idle)."""
        self.room = self.ram.max_bytes

    # -- recall ------------------------------------------------------------------------------
    def recall(self, seq_id: int, tokens: list[int], have: int) -> int:
        """Go on from a state saved here where that gives more of a sequence's `tokens`
        than the `have` its cells hold; the tokens its cells hold then. The disk is looked
        at for what goes on past what RAM gave."""
        have = self._recall_ram(seq_id, tokens, have)
        if self.disk is not None and self._from_disk(tokens, have):
            have = self._recall_ram(seq_id, tokens, have)
        return have

    def _recall_ram(self, seq_id: int, tokens: list[int], have: int) -> int:
        if self.policy.saves_tails:
            while (more := self._recall_tail(seq_id, tokens, have)) > have:
                have = more  # a conversation's turns, saved one by one
            return have
        return self._recall_whole(seq_id, tokens, have)

    def _from_disk(self, tokens: list[int], have: int) -> bool:
        """States on disk that hold more of these tokens than the sequence has, and RAM
        does not hold, are read into RAM (to be restored as RAM hits); whether any was."""
        assert self.disk is not None
        read = False
        for entry in self.disk.candidates(tokens, have, self.ram.max_bytes):
            if not self.ram.holds(entry.tokens, entry.start):
                saved = self.disk.load(entry)
                if saved is None or not self.ram.put(saved):
                    return read
                read = True
        return read

    def persist(self, seconds: float, wait: bool) -> None:
        """Before the instance goes (an unload, a shutdown): the prefixes the cache holds
        are saved, the least recently used first, for at most `seconds`, so that they
        reach the disk; with `wait`, the disk's writes are waited for in that time too
        (a stopping engine's threads end with it)."""
        if self.disk is None:
            return
        deadline = time.monotonic() + seconds
        self.new_round()
        more = True
        # what the writer's queue cannot take would be saved for nothing (RAM goes with
        # the instance)
        while more and time.monotonic() < deadline and not self.disk.lagging():
            _, more = self.park_idle(set(), PERSIST_CELLS)
        if wait:
            self.disk.flush(max(0.0, deadline - time.monotonic()))
        self.disk.close()

    def _gives(self, saved: Saved, common: int) -> int:
        taken = [c.tokens for c in saved.checkpoints]
        p = self.policy
        return reusable(common, saved.held, p.memory, p.sliding_window, taken)[0]

    def _recall_tail(self, seq_id: int, tokens: list[int], have: int) -> int:
        """Restore a saved state that begins within the cells a sequence has and gives
        more: into the scratch sequence (in the room the cache has now: cells no one is
        promised, and those promised to it that it does not use), from where the cells past
        those it has are copied. The tokens its cells hold then."""
        assert self.policy.scratch is not None
        ledger, scratch = self.cache.ledger, self.policy.scratch
        base = ledger.base(seq_id)
        own = have - (base[1] if base else 0)
        room = ledger.free() + ledger.cost(seq_id) - own

        def gives(saved: Saved, common: int) -> int:
            return 0 if saved.start > have else self._gives(saved, common)

        hit = self.ram.match(tokens, gives, room)
        if hit is None or hit.tokens <= have:
            return have
        if (
            self.policy.parks_idle
            and not worth_taking(
                hit.tokens - have,
                len(hit.saved.tokens) - hit.saved.start,
                self.parking.per_token(),
                self.parking.save,
            )
            and not self.ram.continues(tokens, have, hit.tokens)
        ):
            # a few tokens from a larger state (a chat template's first ones from another
            # conversation): reading them costs less than loading it all, unless they
            # are what a saved tail of its own conversation begins with
            return have
        began = time.perf_counter()
        restored = self.memory.write_state(scratch, hit.saved.data, WHOLE)
        if restored:
            self.memory.drop(scratch, hit.tokens)
            self.memory.copy(scratch, seq_id, have, hit.tokens)
        self.memory.drop(scratch)
        if not restored:
            return have
        self.ram.count_hit(hit.tokens - have, round((time.perf_counter() - began) * 1000))
        return hit.tokens

    def _recall_whole(self, seq_id: int, tokens: list[int], have: int) -> int:
        """Start a sequence from a whole saved state where that gives more of its tokens
        than its cells hold: all of the state's cells are restored (in the room the cache
        has now: the cells no one is promised and those promised to it), then those past
        the shared tokens let go. (Here a tail cannot be restored alone: not `saves_tails`.)
        The tokens its cells hold then: 0 where the restore failed."""
        ledger = self.cache.ledger
        hit = self.ram.match(tokens, self._gives, ledger.free() + ledger.cost(seq_id))
        if hit is None or hit.tokens <= have:
            return have
        began = time.perf_counter()
        self.memory.drop(seq_id)
        self.cache.checkpoints.pop(seq_id, None)
        if not self.memory.write_state(seq_id, hit.saved.data, WHOLE):
            self.memory.drop(seq_id)
            return 0
        held = self.memory.held(seq_id)  # what was restored, not what was foreseen
        self.memory.drop(seq_id, hit.tokens)
        if not self.cache.complete(seq_id, hit.tokens, held, hit.saved.checkpoints):
            return 0
        self.ram.count_hit(hit.tokens, round((time.perf_counter() - began) * 1000))
        return hit.tokens

    def leads(self) -> set[int]:
        """The leads of the states in RAM and on disk (engine/holdings.py)."""
        return self.ram.leads() | (self.disk.leads if self.disk is not None else set())

    def stats(self) -> dict[str, int]:
        ram = self.ram
        return {
            "ram_cache_entries": len(ram),
            "ram_cache_bytes": ram.bytes,
            "ram_cache_saves": ram.saves,
            "ram_cache_hits": ram.hits,
            "ram_cache_tokens": ram.restored_tokens,
            "ram_cache_restore_ms": ram.restore_ms,
            **(self.disk.stats() if self.disk is not None else {}),
        }
