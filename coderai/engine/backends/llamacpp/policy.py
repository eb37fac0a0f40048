"""How a model's KV cells may be shared, kept and saved, decided once when it loads, from
what its layers hold and how its context was built. A pure function of those facts; the
cache manager, the host tier and the planner read the result instead of testing flags.
docs/glossary.md defines the words (prefix entry, take over, park, tail, scratch)."""

from __future__ import annotations

from dataclasses import dataclass

from coderai.engine.backends.llamacpp.checkpoints import Memory


@dataclass(frozen=True)
class CachePolicy:
    #: what the model's layers hold beyond full-attention cells
    memory: Memory
    #: its sliding window in tokens (0: none; not the context: ModelInstance.window)
    sliding_window: int
    #: cells are all of a sequence's state: a sequence started from another's cells
    #: shares them, and the ledger counts them once (kv.KvLedger.share). Beside a window
    #: or a recurrent state a restore may fail and the cells be read again, so not there.
    shares_cells: bool
    #: a sequence that starts from a prefix entry takes its cells over, and none copies a
    #: running one's: a window cache sized per sequence (not swa_full) frees a cell only
    #: once one sequence alone holds it, so two live sequences sharing cells could hold
    #: all of it, and a decode would find no room
    takes_over: bool
    #: a sequence id no sequence has, through which part of a sequence's cells is saved
    #: (llama.cpp saves all of a sequence's cells) and a saved state restored; None where
    #: there is no prefix cache or llama.cpp's bound on sequence ids is reached
    scratch: int | None
    #: prefix entries are saved to host RAM and let go once no waiting sequence is to
    #: start from them (parking.py says when: ahead of a prompt or after its first
    #: token). Only without flash attention, which computes every used cell for every
    #: token read, other sequences' too (a 1.3k-token prompt read beside 2.1k idle cells:
    #: 10.2 s against 6.3 s on SmolLM2): there only running sequences and what they share
    #: stay in the cache.
    parks_idle: bool
    #: checkpoints kept per sequence (0 on a model whose cells are all its state), and
    #: the prompt tokens between two
    checkpoints: int
    checkpoint_every: int

    @property
    def saves_tails(self) -> bool:
        """Whether a sequence's cells past those it shares can be saved alone (and
        restored beside the shared ones)."""
        return self.shares_cells and self.scratch is not None


def cache_policy(
    memory: Memory,
    window: int,
    *,
    swa_full: bool,
    flash: bool,
    host_ram: bool,
    parallel: int,
    entries: int,
    id_bound: int,
    checkpoints: int,
    checkpoint_every: int,
) -> CachePolicy:
    """The policy for a model whose layers hold `memory` (a sliding window of `window`
    tokens), in a context built with `swa_full` and `flash` attention, for `parallel`
    running sequences and at most `entries` prefix entries (0: no prefix cache, so no
    scratch), with llama.cpp's bound on sequence ids `id_bound`, and host RAM or not."""
    shares = memory is Memory.FULL
    ids = parallel + entries  # the ids in use: the scratch one is the next
    scratch = ids if entries and ids < id_bound else None
    return CachePolicy(
        memory=memory,
        sliding_window=window,
        shares_cells=shares,
        takes_over=memory is Memory.WINDOW and not swa_full,
        scratch=scratch,
        parks_idle=shares and not flash and host_ram and scratch is not None,
        checkpoints=checkpoints if memory is not Memory.FULL else 0,
        checkpoint_every=checkpoint_every,
    )
