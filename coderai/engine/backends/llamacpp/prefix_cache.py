"""Which finished sequences' KV cells are kept, and which one a new prompt can start from.

Pure bookkeeping: each entry is a sequence id in the context whose cells hold `tokens`;
the backend copies (shares) a matching entry's cells into a new sequence and frees the
cells of entries this class lets go. Matching is on exact token ids, so a prompt never
sees state from another prompt beyond the tokens the two have in common.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens two lists share."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]: halve the gap
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class Hit(NamedTuple):
    """A prefix entry a prompt can start from, and how many of its tokens."""

    entry: int
    tokens: int


class PrefixCache:
    def __init__(
        self, max_tokens: int, max_entries: int, size: Callable[[int], int] | None = None
    ) -> None:
        self.max_tokens = max_tokens
        self.max_entries = max_entries
        #: the cells an entry takes (kv.KvLedger.cost: those it shares with another are
        #: counted there); its token count where not given
        self._size = size
        #: seq id -> tokens its cells hold, least recently used first
        self._entries: OrderedDict[int, list[int]] = OrderedDict()
        self.hits = 0
        self.reused = 0
        #: told of each entry let go for room or its bound (its id and tokens), before
        #: the backend frees its cells: they may be saved elsewhere (ram_cache.py)
        self.on_evict: Callable[[int, list[int]], object] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tokens(self) -> int:
        """The cells the kept entries take."""
        return sum(self._cells(seq_id) for seq_id in self._entries)

    def _cells(self, seq_id: int) -> int:
        return self._size(seq_id) if self._size else len(self._entries[seq_id])

    def match(
        self,
        tokens: list[int],
        usable: Callable[[int, int], int] | None = None,
        *,
        touch: bool = True,
    ) -> Hit | None:
        """The entry sharing the longest prefix with `tokens` and that prefix's length,
        leaving at least the last token to be decoded (its logits are needed). `usable`
        says how much of n shared tokens an entry's state can give (checkpoints.py): less
        on a model whose windowed or recurrent state cannot be cut back anywhere. The
        entry found becomes the most recently used unless `touch` is False (a look that
        uses nothing yet: which entries waiting prompts would start from)."""
        best: Hit | None = None
        for seq_id, cached in self._entries.items():
            shared = min(common_prefix(cached, tokens), len(tokens) - 1)
            if usable is not None and shared > 0:
                shared = usable(seq_id, shared)
            if shared > 0 and (best is None or shared > best[1]):
                best = Hit(seq_id, shared)
        if best is not None and touch:
            self._entries.move_to_end(best.entry)
        return best

    def ids(self) -> list[int]:
        """The kept entries' sequence ids, least recently used first."""
        return list(self._entries)

    def length(self, seq_id: int) -> int:
        """The tokens an entry holds."""
        return len(self._entries[seq_id])

    def tokens_of(self, seq_id: int) -> list[int]:
        return self._entries[seq_id]

    def heads(self) -> list[list[int]]:
        """The tokens of every kept entry (each holds its tokens from the first)."""
        return list(self._entries.values())

    def count_hit(self, reused: int) -> None:
        self.hits += 1
        self.reused += reused

    def add(self, seq_id: int, tokens: list[int]) -> list[int]:
        """Keep a finished sequence's cells (if they fit the bound); returns the ids whose
        cells are to be freed: entries it makes useless (their tokens are a prefix of
        its), or itself if it takes more than the bound. Past the bounds, the least
        recently used go next (`over`, `evict`)."""
        if not tokens:
            return [seq_id]
        self._entries[seq_id] = tokens
        if self._cells(seq_id) > self.max_tokens:
            del self._entries[seq_id]
            return [seq_id]
        gone = [i for i, t in self._entries.items() if i != seq_id
                and common_prefix(t, tokens) == len(t)]  # fmt: skip
        for i in gone:
            self._drop(i)
        return gone

    def over(self) -> bool:
        """Whether the entries kept take more than the bounds allow."""
        return len(self._entries) > self.max_entries or self.tokens > self.max_tokens

    def evict(self, keep: int | None = None) -> int | None:
        """Let the least recently used entry but `keep` go; its id, or None if there is
        none."""
        seq_id = next((i for i in self._entries if i != keep), None)
        if seq_id is not None:
            if self.on_evict is not None:
                self.on_evict(seq_id, self._entries[seq_id])
            self._drop(seq_id)
        return seq_id

    def take(self, seq_id: int) -> None:
        """Hand an entry's cells to the sequence that starts from it: no longer kept here,
        and not to be freed (the backend frees only the entry's own id's hold on them)."""
        self._drop(seq_id)

    def _drop(self, seq_id: int) -> None:
        del self._entries[seq_id]
