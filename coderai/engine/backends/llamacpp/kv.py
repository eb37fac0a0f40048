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


class KvLedger:
    """Cells of one unified KV cache, promised to sequences by owner id.

    A sequence started from another's first cells (llama_memory_seq_cp: the cells are
    shared, not copied) has that one as its base: the shared cells are counted once, with
    the base, and the sequence's own promise counts only what it adds. Many agents with
    one system prompt so hold it once. When a base goes, its cells that others share
    stay: the one sharing the most of them takes them over (counted with it from then
    on), and the others share with that one instead.
    """

    def __init__(self, cells: int) -> None:
        self.cells = cells
        #: cells promised: each owner's reservation less what it shares with its base
        self.reserved = 0
        #: owner -> the cells it may hold, shared ones included
        self._by_owner: dict[int, int] = {}
        #: owner -> (its base, how many of its first cells are the base's)
        self._base: dict[int, tuple[int, int]] = {}

    def copy(self) -> KvLedger:
        """A ledger to try changes on."""
        other = KvLedger(self.cells)
        other.reserved = self.reserved
        other._by_owner = dict(self._by_owner)
        other._base = dict(self._base)
        return other

    def free(self) -> int:
        return self.cells - self.reserved

    def promised(self, owner: int) -> int:
        """The cells promised to an owner, the ones it shares included."""
        return self._by_owner.get(owner, 0)

    def base(self, owner: int) -> tuple[int, int] | None:
        return self._base.get(owner)

    def cost(self, owner: int) -> int:
        """The cells an owner adds to the cache: its reservation less what it shares."""
        base = self._base.get(owner)
        return self.promised(owner) - (base[1] if base else 0)

    def reserve(self, owner: int, cells: int) -> bool:
        """Set an owner's reservation to `cells` (never less than it shares) if the cache
        has room; False if not."""
        base = self._base.get(owner)
        assert base is None or cells >= base[1], "an owner holds the cells it shares"
        change = cells - self.promised(owner)
        if change > self.free():
            return False
        self._by_owner[owner] = cells
        self.reserved += change
        return True

    def share(self, owner: int, base: int, count: int) -> None:
        """A new owner is given `base`'s first `count` cells: it holds them, counted with
        `base`, and its reservation grows from there (again with the same: nothing)."""
        if self._base.get(owner) == (base, count):
            return
        assert owner not in self._by_owner, "an owner is given cells before any of its own"
        assert owner != base and count <= self.promised(base), "a base holds what it shares"
        self._base[owner] = (base, count)
        self._by_owner[owner] = count

    def staying(self, owner: int) -> int:
        """How many of an owner's first cells stay in the cache when it goes: those it
        shares with its base, or that another shares with it."""
        base = self._base.get(owner)
        shares = [n for b, n in self._base.values() if b == owner]
        return max([base[1] if base else 0, *shares])

    def release(self, owner: int) -> None:
        """An owner's cells are freed; the ones others share stay, with the heir."""
        cost = self.cost(owner)
        self._by_owner.pop(owner, None)
        base = self._base.pop(owner, None)
        self.reserved -= cost
        sharers = sorted((c for c, (b, _) in self._base.items() if b == owner),
                         key=lambda c: -self._base[c][1])  # fmt: skip
        if not sharers:
            return
        heir, *others = sharers
        inherited = self._base.pop(heir)[1]
        if base is not None and min(base[1], inherited) > 0:  # still shared further back
            self._base[heir] = (base[0], min(base[1], inherited))
        self.reserved += self.cost(heir) - (self.promised(heir) - inherited)
        for other in others:  # they share no more than the heir holds of them
            self._base[other] = (heir, self._base[other][1])
