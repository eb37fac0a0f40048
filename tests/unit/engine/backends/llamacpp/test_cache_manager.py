"""The cache manager's life-cycle on a stand-in for llama.cpp's sequence memory
(coderai/engine/backends/llamacpp/cache_manager.py): ids, promises, prefix entries, taking
an entry over, checkpoints."""

from __future__ import annotations

import pytest

from coderai.engine.backends.llamacpp.cache_manager import CacheManager
from coderai.engine.backends.llamacpp.checkpoints import Checkpoint, Held, Memory
from coderai.engine.backends.llamacpp.llama_memory import PARTIAL
from coderai.engine.backends.llamacpp.policy import cache_policy
from coderai.engine.backends.llamacpp.prefix_cache import Hit
from tests.support.cells import StandInMemory


def manager(
    memory: Memory = Memory.FULL, cells: int = 100, parallel: int = 2, checkpoints: int = 2
) -> tuple[CacheManager, StandInMemory]:
    policy = cache_policy(memory, 8 if memory is Memory.WINDOW else 0, swa_full=False,
                          flash=True, host_ram=False, parallel=parallel, entries=parallel,
                          id_bound=64, checkpoints=checkpoints, checkpoint_every=10)  # fmt: skip
    stand_in = StandInMemory()
    cache = CacheManager(policy, stand_in, cells=cells, parallel=parallel, entries=parallel,
                         cache_tokens=cells)  # fmt: skip
    return cache, stand_in


def decoded(stand_in: StandInMemory, seq_id: int, tokens: int) -> None:
    stand_in.cells[seq_id] = set(range(tokens))


def test_ids_are_handed_out_lowest_first_and_come_back_when_retired() -> None:
    cache, stand_in = manager()
    first, second = cache.new_id(), cache.new_id()
    assert (first, second) == (0, 1)
    decoded(stand_in, first, 5)
    cache.reserve(first, 10)
    cache.retire(first)
    assert stand_in.tokens(first) == 0 and cache.promised(first) == 0
    assert cache.new_id() == first


def test_a_finished_sequence_becomes_an_entry_a_new_prompt_starts_from() -> None:
    cache, stand_in = manager()
    old, new = cache.new_id(), cache.new_id()
    cache.reserve(old, 30)
    decoded(stand_in, old, 20)
    cache.finish(old, list(range(20)))
    assert cache.promised(old) == 20  # the promise shrinks to what its cells hold
    hit = cache.lookup([*range(12), 99, 98])
    assert hit == Hit(old, 12)
    cache.will_share(new, hit)
    assert cache.reserve(new, 20, keep=old)
    assert cache.start_from(hit.entry, new, hit.tokens) == 12
    assert stand_in.cells[new] == set(range(12))
    # the shared cells are counted once: with the entry
    assert cache.ledger.cost(new) == 8 and cache.ledger.reserved == 28
    # a prompt that is all of an entry leaves its last token to be read (its logits)
    assert cache.lookup(list(range(20))) == Hit(old, 19)


def test_room_is_made_by_letting_the_least_recently_used_entry_go_but_the_one_kept() -> None:
    cache, stand_in = manager(cells=40, parallel=3)
    a, b, c = cache.new_id(), cache.new_id(), cache.new_id()
    for seq_id, first in ((a, 100), (b, 200)):
        cache.reserve(seq_id, 15)
        decoded(stand_in, seq_id, 15)
        cache.finish(seq_id, list(range(first, first + 15)))
    assert cache.lookup(list(range(100, 110))) == Hit(a, 9)  # a is now the most recent
    assert cache.reserve(c, 20)
    assert cache.prefixes.ids() == [a]  # b, the least recently used, went
    assert stand_in.tokens(b) == 0 and cache.new_id() == b
    # keeping a, nothing more can go: the promise fails and is left as it was
    assert not cache.reserve(c, 30, keep=a)
    assert cache.promised(c) == 20 and cache.prefixes.ids() == [a]


def test_a_sequence_that_does_not_fit_beside_its_entry_takes_the_entry_over() -> None:
    cache, stand_in = manager(cells=50)
    old, new = cache.new_id(), cache.new_id()
    cache.reserve(old, 40)
    decoded(stand_in, old, 40)
    cache.finish(old, list(range(40)))
    told: list[tuple[int, int, int]] = []
    cache.on_let_go = lambda entry, tokens, shared: told.append((entry, len(tokens), shared))
    hit = cache.lookup([*range(30), 7])
    assert hit == Hit(old, 30)
    # beside the entry's 40 cells, 45 do not fit, and 30 of them are the entry's own
    assert cache.take_over(new, hit, 45) == 30
    assert told == [(old, 40, 30)]
    assert cache.prefixes.ids() == [] and cache.promised(old) == 0
    assert cache.promised(new) == 45 and cache.ledger.reserved == 45
    assert stand_in.cells[new] == set(range(30))


def test_taking_over_what_does_not_fit_even_so_changes_nothing() -> None:
    cache, stand_in = manager(cells=50)
    old, new = cache.new_id(), cache.new_id()
    cache.reserve(old, 40)
    decoded(stand_in, old, 40)
    cache.finish(old, list(range(40)))
    before = (cache.ledger.reserved, cache.prefixes.ids(), len(stand_in.calls))
    assert cache.take_over(new, Hit(old, 30), 51) is None
    assert (cache.ledger.reserved, cache.prefixes.ids(), len(stand_in.calls)) == before


def test_growing_promises_a_step_more_never_past_the_need() -> None:
    cache, _ = manager(cells=100)
    seq = cache.new_id()
    cache.reserve(seq, 20)
    assert cache.grow(seq, need=45, step=16) and cache.promised(seq) == 36
    assert cache.grow(seq, need=45, step=16) and cache.promised(seq) == 45
    assert not cache.grow(seq, need=45, step=16)  # all it can need: nothing to grow
    other = cache.new_id()
    cache.reserve(other, 55)
    assert not cache.grow(other, need=80, step=16)  # no room: its promise stays
    assert cache.promised(other) == 55


def test_entries_past_the_bounds_go_as_soon_as_one_is_added() -> None:
    cache, stand_in = manager(cells=100, parallel=1)
    first, second = cache.new_id(), cache.new_id()
    for seq_id, start in ((first, 0), (second, 50)):
        cache.reserve(seq_id, 10)
        decoded(stand_in, seq_id, 10)
        cache.finish(seq_id, list(range(start, start + 10)))
    assert cache.prefixes.ids() == [second]  # one entry per running sequence at most
    assert stand_in.tokens(first) == 0 and cache.promised(first) == 0


def test_checkpoints_are_taken_when_due_and_the_latest_kept() -> None:
    cache, stand_in = manager(Memory.WINDOW, checkpoints=2)
    seq = cache.new_id()
    assert cache.checkpoint_due(seq, 10, 50)  # every 10 tokens while a prompt is read
    assert not cache.checkpoint_due(seq, 5, 50)
    assert cache.checkpoint_due(seq, 49, 50)  # and before its last token
    for tokens in (10, 20, 30):
        decoded(stand_in, seq, tokens)
        cache.checkpoint(seq, tokens)
    assert [c.tokens for c in cache.checkpoints[seq]] == [20, 30]
    assert ("read_state", seq, PARTIAL) in stand_in.calls
    full, _ = manager(Memory.FULL)
    assert not full.checkpoint_due(seq, 10, 50)  # its cells are all its state


def test_a_window_state_not_covering_the_prefix_is_restored_from_its_checkpoint() -> None:
    cache, stand_in = manager(Memory.WINDOW)
    entry, seq = cache.new_id(), cache.new_id()
    cache.reserve(entry, 40)
    cache.checkpoints[entry] = [Checkpoint(16, bytes(8)), Checkpoint(30, bytes(8))]
    stand_in.cells[entry] = set(range(28, 40))  # its window slid past the first 28
    cache.finish(entry, list(range(40)))
    # 35 tokens in common, but the held window covers none of them, and the checkpoint
    # at 30 is the latest within them
    assert cache.lookup(list(range(36))) == Hit(entry, 30)
    assert cache.start_from(entry, seq, 30) == 30
    assert ("write_state", seq, PARTIAL) in stand_in.calls and cache.restored == 1
    assert [c.tokens for c in cache.checkpoints[seq]] == [16, 30]


def test_without_a_checkpoint_there_a_window_sequence_reads_its_prompt_again() -> None:
    cache, stand_in = manager(Memory.WINDOW)
    entry, seq = cache.new_id(), cache.new_id()
    stand_in.cells[entry] = set(range(20, 40))
    stand_in.cells[seq] = set(range(20, 25))  # what the copy gave it
    assert not cache.complete(seq, 25, Held(20, 40), [Checkpoint(16, bytes(8))])
    assert stand_in.tokens(seq) == 0 and seq not in cache.checkpoints
    stand_in.refuse.add(seq)  # one there that llama.cpp refuses: the same
    assert cache.start_from(entry, seq, 25) == 0
    # a prefix the window still covers needs no checkpoint
    assert cache.complete(seq, 30, Held(20, 40), [])


def test_counters_describe_the_cache() -> None:
    cache, stand_in = manager(Memory.WINDOW)
    seq = cache.new_id()
    cache.reserve(seq, 12)
    decoded(stand_in, seq, 10)
    cache.checkpoint(seq, 10)
    stats = cache.stats()
    assert stats["kv_reserved"] == 12 and stats["kv_cells"] == 100
    assert stats["checkpoints"] == 1 and stats["checkpoint_bytes"] == 80


def test_there_is_an_id_per_running_sequence_and_per_entry_and_no_more() -> None:
    cache, _ = manager(parallel=2)
    assert sorted(cache.new_id() for _ in range(4)) == [0, 1, 2, 3]
    with pytest.raises(IndexError):  # the planner never asks for a fifth
        cache.new_id()


def test_a_retired_id_takes_its_checkpoints_and_promise_with_it() -> None:
    cache, stand_in = manager(Memory.WINDOW)
    seq = cache.new_id()
    cache.reserve(seq, 20)
    decoded(stand_in, seq, 10)
    cache.checkpoint(seq, 10)
    assert not cache.checkpoint_due(seq, 10, 50) and not cache.checkpoint_due(seq, 15, 50)
    assert cache.checkpoint_due(seq, 20, 50)  # every 10 from the last one
    cache.retire(seq)
    assert seq not in cache.checkpoints and cache.ledger.reserved == 0


def test_a_sequence_not_admitted_after_all_gives_back_its_promise_and_its_share() -> None:
    cache, stand_in = manager()
    entry, seq = cache.new_id(), cache.new_id()
    cache.reserve(entry, 30)
    decoded(stand_in, entry, 30)
    cache.finish(entry, list(range(30)))
    cache.will_share(seq, Hit(entry, 20))
    assert cache.reserve(seq, 50) and cache.ledger.reserved == 60
    cache.withdraw(seq)
    assert cache.ledger.reserved == 30 and cache.ledger.base(seq) is None


def test_an_entry_whose_tokens_begin_a_newer_one_goes_when_that_one_is_kept() -> None:
    cache, stand_in = manager()
    short, long = cache.new_id(), cache.new_id()
    for seq_id, tokens in ((short, 20), (long, 30)):
        cache.reserve(seq_id, tokens)
        decoded(stand_in, seq_id, tokens)
    cache.finish(short, list(range(20)))
    cache.finish(long, list(range(30)))  # holds all `short` does
    assert cache.prefixes.ids() == [long]
    assert stand_in.tokens(short) == 0 and cache.promised(short) == 0
    assert cache.new_id() == short


def test_every_restored_checkpoint_is_counted() -> None:
    cache, _ = manager(Memory.WINDOW)
    points = [Checkpoint(30, bytes(8))]
    for seq in (cache.new_id(), cache.new_id()):
        assert cache.complete(seq, 30, Held(28, 40), points)
    assert cache.restored == 2
