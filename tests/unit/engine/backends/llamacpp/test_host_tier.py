"""Prompt state saved to host RAM and recalled, on a stand-in for llama.cpp's sequence
memory (coderai/engine/backends/llamacpp/host_tier.py)."""

from __future__ import annotations

from coderai.engine.backends.llamacpp.cache_manager import CacheManager
from coderai.engine.backends.llamacpp.checkpoints import Memory
from coderai.engine.backends.llamacpp.host_tier import RAM_TAIL, HostTier
from coderai.engine.backends.llamacpp.llama_memory import WHOLE
from coderai.engine.backends.llamacpp.parking import Parking
from coderai.engine.backends.llamacpp.policy import cache_policy
from coderai.engine.backends.llamacpp.ram_cache import RamCache
from tests.support.cells import POSITION_BYTES, StandInMemory


def tier(
    memory: Memory = Memory.FULL, ram: int = 1 << 20, cells: int = 200
) -> tuple[HostTier, StandInMemory]:
    policy = cache_policy(memory, 8 if memory is Memory.WINDOW else 0, swa_full=False,
                          flash=True, host_ram=True, parallel=2, entries=2, id_bound=64,
                          checkpoints=2, checkpoint_every=16)  # fmt: skip
    stand_in = StandInMemory()
    cache = CacheManager(policy, stand_in, cells=cells, parallel=2, entries=2,
                         cache_tokens=cells)  # fmt: skip
    return HostTier(RamCache(ram), cache, Parking(0.0, lambda: None)), stand_in


def sharing(host: HostTier, stand_in: StandInMemory, shared: int, own: int) -> tuple[int, int]:
    """A base sequence holding `shared` cells, and one started from them holding `own`
    more."""
    cache = host.cache
    base, seq = cache.new_id(), cache.new_id()
    cache.reserve(base, shared)
    stand_in.cells[base] = set(range(shared))
    cache.ledger.share(seq, base, shared)
    cache.reserve(seq, shared + own)
    stand_in.cells[seq] = set(range(shared + own))
    return base, seq


def test_only_the_cells_past_those_staying_in_the_cache_are_saved_through_the_scratch() -> None:
    host, stand_in = tier(cells=600)
    scratch = host.policy.scratch
    assert scratch == 4
    _, seq = sharing(host, stand_in, RAM_TAIL, 20)
    saved = host.save(seq, list(range(RAM_TAIL + 20)))
    assert saved == 20 * POSITION_BYTES  # its own 20, not the RAM_TAIL it shares
    assert ("copy", seq, scratch, RAM_TAIL, -1) in stand_in.calls
    assert stand_in.tokens(scratch) == 0  # the scratch sequence is left empty
    assert len(host.ram) == 1


def test_a_few_cells_staying_in_the_cache_are_saved_apart_unless_ram_holds_them() -> None:
    """A conversation's turns past a chat template's first tokens, which the next
    conversation shares: the template's cells are saved too, on their own, so the turns
    can come back whoever holds those by then; once, as long as RAM holds them."""
    host, stand_in = tier()
    scratch = host.policy.scratch
    assert scratch is not None
    base, seq = sharing(host, stand_in, 30, 20)
    saved = host.save(seq, list(range(50)))
    assert saved == 50 * POSITION_BYTES  # its own 20, and the 30 it shares, apart
    assert ("copy", seq, scratch, 0, 30) in stand_in.calls
    assert len(host.ram) == 2 and host.ram.covers(list(range(30)), RAM_TAIL)
    assert stand_in.tokens(scratch) == 0
    host.cache.retire(seq)
    other = host.cache.new_id()
    host.cache.ledger.share(other, base, 30)
    host.cache.reserve(other, 40)
    stand_in.cells[other] = set(range(30)) | set(range(100, 110))
    assert host.save(other, [*range(30), *range(100, 110)]) == 10 * POSITION_BYTES
    # all of them gone from the cache, the first conversation comes back from RAM alone
    for held in (base, other):
        host.cache.retire(held)
    again = host.cache.new_id()
    host.cache.reserve(again, 60)
    assert host.recall(again, [*range(50), 7], 0) == 50
    assert stand_in.cells[again] == set(range(50))


def test_of_two_saved_states_giving_as_much_the_smaller_is_restored() -> None:
    host, stand_in = tier()
    cache = host.cache
    for tokens in ([*range(30), *range(200, 260)], list(range(30))):
        a = cache.new_id()
        cache.reserve(a, len(tokens))
        stand_in.cells[a] = set(range(len(tokens)))
        assert host.save(a, tokens)
        cache.retire(a)
    hit = host.ram.match([*range(30), 5, 6], lambda saved, common: common, 200)
    assert hit is not None and hit.tokens == 30 and len(hit.saved.tokens) == 30


def test_a_conversations_turns_come_back_one_by_one() -> None:
    host, stand_in = tier()
    cache = host.cache
    first, second = list(range(40)), [*range(40), *range(100, 130)]
    a = cache.new_id()
    cache.reserve(a, 40)
    stand_in.cells[a] = set(range(40))
    assert host.save(a, first)
    stand_in.cells[a] = set(range(70))
    assert host.save(a, second)  # whole: it shares nothing
    cache.retire(a)
    seq = cache.new_id()
    cache.reserve(seq, 100)
    assert host.recall(seq, [*second, 7], 0) == 70
    assert stand_in.cells[seq] == set(range(70))
    assert host.ram.hits == 1 and host.ram.restored_tokens == 70


def test_a_whole_window_state_serves_a_prompt_its_window_covers() -> None:
    host, stand_in = tier(Memory.WINDOW)
    cache = host.cache
    a = cache.new_id()
    cache.reserve(a, 40)
    stand_in.cells[a] = set(range(40))
    assert host.save(a, list(range(40)))
    cache.retire(a)
    seq = cache.new_id()
    cache.reserve(seq, 60)
    # what was saved is the window before position 40: it serves 40 tokens, not 30 (a
    # state cut back to 30 would lack the window before 30)
    assert host.recall(seq, [*range(30), 99, 98], 0) == 0
    assert host.recall(seq, [*range(40), 99, 98], 0) == 40
    assert stand_in.cells[seq] == set(range(40))
    assert ("write_state", seq, WHOLE) in stand_in.calls


def test_a_state_llama_cpp_refuses_leaves_the_sequence_reading_from_the_start() -> None:
    host, stand_in = tier(Memory.WINDOW)
    cache = host.cache
    a = cache.new_id()
    cache.reserve(a, 40)
    stand_in.cells[a] = set(range(40))
    host.save(a, list(range(40)))
    cache.retire(a)
    seq = cache.new_id()
    stand_in.refuse.add(seq)
    stand_in.cells[seq] = set(range(5))
    assert host.recall(seq, [*range(40), 99], 5) == 0
    assert stand_in.tokens(seq) == 0


def test_parking_saves_idle_entries_while_ram_has_room_and_keeps_the_busy_ones() -> None:
    host, stand_in = tier(ram=70 * POSITION_BYTES)
    cache = host.cache
    ids = [cache.new_id(), cache.new_id()]
    for seq_id, start in zip(ids, (0, 100), strict=True):
        cache.reserve(seq_id, 40)
        stand_in.cells[seq_id] = set(range(40))
        cache.finish(seq_id, list(range(start, start + 40)))
    host.park_idle(busy=set())
    # the first fits the RAM; beside it the second does not, so it stays in the cache
    assert cache.prefixes.ids() == [ids[1]] and host.ram.saves == 1
    host.park_idle(busy={ids[1]})
    assert cache.prefixes.ids() == [ids[1]]


def test_an_entry_let_go_with_a_long_tail_is_saved_first() -> None:
    host, stand_in = tier(Memory.WINDOW)
    cache = host.cache
    entry = cache.new_id()
    cache.reserve(entry, 300)
    stand_in.cells[entry] = set(range(300))
    cache.finish(entry, list(range(300)))
    cache.let_go(entry, 20)  # 280 tokens past those a sequence shares
    assert host.ram.saves == 1
    short = cache.new_id()
    cache.reserve(short, 30)
    stand_in.cells[short] = set(range(30))
    cache.finish(short, list(range(500, 530)))
    cache.let_go(short, 20)  # 10 past them: read again, not saved
    assert host.ram.saves == 1
