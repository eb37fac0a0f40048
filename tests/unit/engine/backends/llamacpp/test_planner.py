"""The step planner on a stand-in for llama.cpp's sequence memory
(coderai/engine/backends/llamacpp/planner.py): admission, chunks, leaders, growth,
preemption, prefix entries and parking. A test moves a sequence on as the runner would
(`advance`), so no model is needed."""

from __future__ import annotations

import codecs
import functools
import time
from typing import Any, cast

from coderai.bus.messages import Job
from coderai.engine.backends.base import Sequence
from coderai.engine.backends.llamacpp.cache_manager import CacheManager
from coderai.engine.backends.llamacpp.checkpoints import Memory
from coderai.engine.backends.llamacpp.host_tier import RAM_TAIL, HostTier
from coderai.engine.backends.llamacpp.kv import cells_needed
from coderai.engine.backends.llamacpp.ngram import NgramIndex
from coderai.engine.backends.llamacpp.parking import Parking
from coderai.engine.backends.llamacpp.planner import Planner
from coderai.engine.backends.llamacpp.policy import cache_policy
from coderai.engine.backends.llamacpp.prefix_cache import Hit
from coderai.engine.backends.llamacpp.ram_cache import RamCache
from coderai.engine.backends.llamacpp.settings import MIN_CHUNK
from coderai.engine.backends.llamacpp.slot import Plan, Run, Slot
from coderai.engine.backends.llamacpp.speculation import Speculation
from coderai.engine.backends.llamacpp.vision import Images
from tests.support.cells import POSITION_BYTES, StandInMemory

N_BATCH = 64


class World:
    """A planner over a stand-in memory, and the sequences it has been given."""

    def __init__(
        self,
        cells: int = 400,
        parallel: int = 4,
        *,
        memory: Memory = Memory.FULL,
        flash: bool = True,
        ram: int = 0,
        checkpoints: int = 0,
        reserve_step: int = 16,
        cache_tokens: int | None = None,
        swa_full: bool = False,
        draft_length: int | None = None,
        speculative: bool = False,
    ) -> None:
        cache_tokens = cells if cache_tokens is None else cache_tokens
        entries = parallel if cache_tokens else 0
        self.policy = cache_policy(memory, 8 if memory is Memory.WINDOW else 0,
                                   swa_full=swa_full, flash=flash, host_ram=ram > 0,
                                   parallel=parallel, entries=entries, id_bound=64,
                                   checkpoints=checkpoints, checkpoint_every=32)  # fmt: skip
        self.memory = StandInMemory()
        self.cache = CacheManager(self.policy, self.memory, cells=cells, parallel=parallel,
                                  entries=entries, cache_tokens=cache_tokens)  # fmt: skip
        self.parking = Parking(0.0, lambda: None)
        self.host = HostTier(RamCache(ram), self.cache, self.parking) if ram else None
        enabled = speculative or draft_length is not None
        speculation = Speculation(enabled, None, draft_length, self.memory)
        self.planner = Planner(self.cache, self.host, speculation, n_batch=N_BATCH,
                               reserve_step=reserve_step, parking=self.parking,
                               park_step=0.5)  # fmt: skip

    def start(self, tokens: list[int], max_tokens: int | None = 8) -> Slot:
        seq = Sequence(job=Job(1, {}, "completion", prompt="", max_tokens=max_tokens))
        seq.prompt_tokens = len(tokens)
        slot = Slot(
            seq=seq,
            seq_id=self.cache.new_id(),
            tokens=list(tokens),
            sampler=cast(Any, None),
            decoder=codecs.getincrementaldecoder("utf-8")(),
            need=cells_needed(len(tokens), max_tokens or 1000),
            bounded=max_tokens is not None,
        )
        seq.state = slot
        self.planner.add(slot)
        return slot

    def step(self, *slots: Slot, budget: int = N_BATCH) -> Plan:
        """Plan a step and run it as the runner would: each run's cells filled, and a
        token sampled for each sequence whose run reached its last known one."""
        plan = self.planner.plan(list(slots), budget)
        for slot, first, end in plan.runs:
            # what every step holds to: a sequence decodes only into cells promised to it,
            # where its cells end, and the promises fit the cache
            assert first == slot.decoded and end <= self.cache.promised(slot.seq_id)
            assert self.cache.ledger.reserved <= self.cache.ledger.cells
            self.memory.cells.setdefault(slot.seq_id, set()).update(range(first, end))
            slot.decoded = end
            if end == len(slot.tokens):
                slot.tokens.append(1000 + end)
        return plan

    def release(self, slot: Slot) -> None:
        slot.seq.state = None
        self.planner.release(slot)


def spans(plan: Plan) -> list[tuple[int, int, int]]:
    return [(run.slot.seq_id, run.first, run.end) for run in plan.runs]


def until_preempted(world: World, *slots: Slot, times: int = 1) -> None:
    """Step until `times` sequences have been preempted (a bounded number of steps: each
    step decodes a token, and the cache is small)."""
    for _ in range(60):
        world.step(*slots)
        if world.planner.preemptions >= times:
            return
    raise AssertionError(f"{world.planner.preemptions} preempted after 60 steps")


def test_prompts_are_read_oldest_first_within_the_batch_then_decoded_a_token_a_step() -> None:
    world = World()
    a, b = world.start(list(range(50))), world.start(list(range(100, 140)))
    assert spans(world.step(a, b)) == [(a.seq_id, 0, 50), (b.seq_id, 0, 14)]
    assert a.admitted and b.admitted and a.order < b.order
    # a decodes now: b's prompt is read at most `budget` tokens a step beside it
    assert spans(world.step(a, b, budget=16)) == [(a.seq_id, 50, 51), (b.seq_id, 14, 30)]
    assert spans(world.step(a, b, budget=16)) == [(a.seq_id, 51, 52), (b.seq_id, 30, 40)]
    assert spans(world.step(a, b)) == [(a.seq_id, 52, 53), (b.seq_id, 40, 41)]


def test_a_sequence_waits_until_cells_can_be_promised_and_then_joins() -> None:
    world = World(cells=100, cache_tokens=0)
    a = world.start(list(range(80)), max_tokens=10)
    b = world.start(list(range(200, 230)), max_tokens=10)
    plan = world.step(a, b)
    assert spans(plan) == [(a.seq_id, 0, 64)] and not b.admitted
    assert list(world.planner.waiting) == [b]
    world.release(a)
    assert spans(world.step(b)) == [(b.seq_id, 0, 30)]
    assert world.planner.stats()["running"] == 1


def test_a_prompt_chunk_ends_at_its_last_checkpoint_on_a_window_model() -> None:
    world = World(memory=Memory.WINDOW, checkpoints=2)
    a = world.start(list(range(40)))
    # the prompt's last point is before its last token: a checkpoint is taken there
    assert spans(world.step(a)) == [(a.seq_id, 0, 39)]
    assert spans(world.step(a)) == [(a.seq_id, 39, 40)]


def test_a_finished_sequences_cells_serve_the_next_prompt_that_begins_with_them() -> None:
    world = World()
    a = world.start(list(range(50)))
    world.step(a)
    world.release(a)
    assert world.cache.prefixes.ids() == [a.seq_id]
    b = world.start([*range(50), 1050, 7, 8])
    plan = world.step(b)  # the entry holds what a read: its prompt (its token sampled last)
    assert b.seq.cached_tokens == 50 and spans(plan) == [(b.seq_id, 50, 53)]
    assert world.cache.stats()["prefix_hits"] == 1


def test_the_same_prompt_twice_is_read_once_the_second_copying_the_firsts_cells() -> None:
    world = World()
    prompt = list(range(40))
    a, b = world.start(prompt), world.start(prompt)
    # b waits for its leader a to read the shared tokens (all but the last: its logits)
    assert spans(world.step(a, b)) == [(a.seq_id, 0, 40)]
    assert b.leader is a and b.decoded == 0
    # then copies a's cells and reads only its last token
    assert spans(world.step(a, b)) == [(a.seq_id, 40, 41), (b.seq_id, 39, 40)]
    assert ("copy", a.seq_id, b.seq_id, 0, 39) in world.memory.calls
    assert b.leader is None and b.seq.cached_tokens == 39


def test_a_leader_not_stepped_is_not_waited_for() -> None:
    world = World()
    prompt = list(range(40))
    a, b = world.start(prompt), world.start(prompt)
    world.step(a)  # both admitted: a reads its prompt, b is not stepped
    assert b.leader is a
    assert spans(world.step(b)) == [(b.seq_id, 0, 40)]  # a's client lags: b reads itself
    assert b.leader is None


def test_a_sequence_that_cannot_grow_pauses_and_the_youngest_is_preempted() -> None:
    world = World(cells=60, reserve_step=4, cache_tokens=0)
    a = world.start(list(range(20)), max_tokens=None)
    b = world.start(list(range(100, 120)), max_tokens=None)
    world.step(a, b)
    assert world.cache.promised(a.seq_id) == world.cache.promised(b.seq_id) == 24
    paused_alone = False
    for _ in range(30):  # they grow 4 cells at a time until the 60 are promised
        plan = world.step(a, b)
        paused_alone |= plan.paused == [b] and [run.slot for run in plan.runs] == [a]
        if world.planner.preemptions:
            break
    # b could not grow and paused while a went on; when a could not either, b, the
    # youngest, gave its cells up and a grew into them
    assert paused_alone and world.planner.preemptions == 1
    assert a.admitted and world.cache.promised(a.seq_id) == 36
    assert not b.admitted and b.decoded == 0 and world.planner.waiting[0] is b
    assert world.memory.tokens(b.seq_id) == 0
    assert len(b.tokens) > 20  # what it sampled stays: it reads it all again later


def test_a_preempted_sequence_comes_back_from_host_ram() -> None:
    world = World(cells=60, reserve_step=4, cache_tokens=0, ram=1 << 20)
    a = world.start(list(range(20)), max_tokens=None)
    b = world.start(list(range(100, 120)), max_tokens=None)
    until_preempted(world, a, b)
    assert world.planner.preemptions == 1 and world.host is not None
    assert world.host.ram.saves == 1
    read = len(b.tokens) - 1
    world.release(a)
    world.step(b)
    assert b.admitted and world.host.ram.hits == 1 and b.decoded >= read
    # reading its own tokens again is no prefix hit, and its cached count stays its first
    assert world.cache.stats()["prefix_hits"] == 0 and b.seq.cached_tokens == 0


def test_idle_entries_are_parked_in_host_ram_without_flash_attention() -> None:
    world = World(flash=False, ram=1 << 20)
    assert world.policy.parks_idle
    a = world.start(list(range(50)))
    world.step(a)
    world.release(a)
    assert world.cache.prefixes.ids() == [a.seq_id]
    b = world.start(list(range(500, 540)))  # another conversation: a's entry is idle
    world.step(b)  # nothing timed yet: the park waits for b's first token ...
    assert world.cache.prefixes.ids() == [a.seq_id]
    world.step(b)  # ... and is made in the step after it
    assert world.cache.prefixes.ids() == [] and world.host is not None
    assert world.host.ram.saves == 1 and world.memory.tokens(a.seq_id) == 0
    # a's conversation comes back: its state is restored rather than read
    c = world.start([*range(50), 1050, 3])
    plan = world.step(b, c)
    assert world.host.ram.hits == 1 and (c.seq_id, 50, 52) in spans(plan)


def test_a_few_tokens_in_common_with_a_parked_conversation_are_taken_and_it_comes_back() -> None:
    """A new conversation shares a chat template's first tokens with the last one: it
    starts from them, and the last one's turns past them are saved (with those tokens,
    apart), so that conversation's next turn still comes back whole from RAM."""
    world = World(cells=2000, flash=False, ram=1 << 20)
    finished(world, list(range(600)))
    b = world.start([*range(20), *range(900, 960)])  # 20 of the 600 kept
    plan = world.step(b)
    assert spans(plan) == [(b.seq_id, 20, 80)] and b.seq.cached_tokens == 20
    world.step(b)  # (the park comes after b's first token)
    assert world.host is not None and world.host.ram.covers(list(range(20)), RAM_TAIL)
    world.release(b)
    c = world.start([*range(600), 7, 8])
    assert spans(world.step(c)) == [(c.seq_id, 600, 602)] and c.seq.cached_tokens == 600


def test_fewer_tokens_in_common_than_a_chunk_are_read_again_where_entries_are_parked() -> None:
    world = World(cells=2000, flash=False, ram=1 << 20)
    finished(world, list(range(600)))
    b = world.start([*range(MIN_CHUNK - 1), *range(900, 960)])
    plan = world.step(b)
    assert spans(plan) == [(b.seq_id, 0, 64)] and b.seq.cached_tokens == 0


def test_a_window_model_sized_per_sequence_takes_its_entry_over_and_has_no_leaders() -> None:
    world = World(memory=Memory.WINDOW, checkpoints=2)
    prompt = list(range(40))
    a = world.start(prompt)
    world.step(a)
    world.step(a)
    world.release(a)
    b, c = world.start([*prompt, 1040, 5]), world.start([*prompt, 1040, 6])
    world.step(b, c)
    assert world.cache.prefixes.ids() == []  # b took a's cells over
    assert b.seq.cached_tokens == 40 and c.leader is None  # c copies no running one


def test_releasing_a_waiting_sequence_frees_its_id() -> None:
    world = World(cells=40, cache_tokens=0)
    a = world.start(list(range(30)))
    b = world.start(list(range(30)))
    world.step(a)
    world.release(b)
    assert not world.planner.waiting and world.planner.stats()["released"] == 1
    assert world.cache.new_id() == b.seq_id


def test_runs_are_named_tuples_of_a_sequence_and_its_span() -> None:
    world = World()
    a = world.start(list(range(10)))
    run = world.step(a).runs[0]
    assert run == Run(a, 0, 10) and (run.first, run.end) == (0, 10)


def test_an_image_is_read_as_a_step_of_its_own_between_its_text() -> None:
    world = World()
    a = world.start(list(range(40)))
    a.images = Images(at={10: (None, 16)})  # 16 image tokens at position 10
    assert spans(world.step(a)) == [(a.seq_id, 0, 10)]  # the text up to the image
    assert spans(world.step(a)) == [(a.seq_id, 10, 26)]  # the image, whole
    assert spans(world.step(a, budget=8)) == [(a.seq_id, 26, 40)]  # alone: n_batch


def test_an_image_takes_its_step_even_where_it_is_larger_than_the_budget() -> None:
    world = World()
    a, b = world.start(list(range(10))), world.start(list(range(100, 140)))
    b.images = Images(at={0: (None, 30)})
    world.step(a)
    plan = world.step(a, b, budget=8)
    assert spans(plan) == [(a.seq_id, 10, 11), (b.seq_id, 0, 30)]


def test_the_counters_name_what_they_count() -> None:
    world = World()
    a = world.start(list(range(30)))
    world.step(a)
    assert world.planner.stats() == {"running": 1, "waiting": 0, "kv_used": 30,
                                     "preempted": 0, "released": 0, "parked_cells": 0,
                                     "parks_deferred": 0}  # fmt: skip
    assert world.cache.stats() == {
        "kv_reserved": 37, "kv_cells": 400, "prefix_hits": 0, "prefix_tokens": 0,
        "prefix_cached": 0, "checkpoints": 0, "checkpoint_bytes": 0, "checkpoints_restored": 0,
    }  # fmt: skip


def test_a_follower_on_a_window_model_takes_its_leaders_state_whole() -> None:
    world = World(memory=Memory.WINDOW, swa_full=True)
    prompt = list(range(40))
    a, b = world.start(prompt), world.start(prompt)
    world.step(a, b)
    assert b.leader is a
    world.step(a, b)
    # not shared cell by cell: its own are dropped and the leader's copied from 0
    assert ("drop", b.seq_id, -1) in world.memory.calls
    assert ("copy", a.seq_id, b.seq_id, 0, 39) in world.memory.calls
    assert b.decoded == 40 and b.seq.cached_tokens == 39
    assert world.cache.stats()["prefix_hits"] == 1
    assert world.cache.stats()["prefix_tokens"] == 39


def test_a_leader_whose_window_slid_past_the_shared_tokens_is_not_followed() -> None:
    world = World(memory=Memory.WINDOW, swa_full=True)
    prompt = list(range(40))
    a, b = world.start(prompt), world.start(prompt)
    world.step(a, b)
    world.memory.cells[a.seq_id] = set(range(35, 41))  # only its window is held now
    plan = world.step(a, b)
    assert b.leader is None and (b.seq_id, 0, 40) in spans(plan)
    assert not any(call[:3] == ("copy", a.seq_id, b.seq_id) for call in world.memory.calls)


def test_a_leader_gone_or_preempted_is_not_waited_for() -> None:
    world = World()
    prompt = list(range(40))
    a, b = world.start(prompt), world.start(prompt)
    world.step(a)
    world.release(a)
    plan = world.step(b)
    assert b.leader is None and spans(plan) == [(b.seq_id, 0, 40)]


def test_a_leader_still_reading_is_waited_for_until_it_has_read_the_shared_tokens() -> None:
    world = World()
    prompt = list(range(100))
    a, b = world.start(prompt), world.start(prompt)
    assert spans(world.step(a, b, budget=64)) == [(a.seq_id, 0, 64)]
    assert b.leader is a and b.decoded == 0
    assert spans(world.step(a, b, budget=64)) == [(a.seq_id, 64, 100)]
    assert spans(world.step(a, b)) == [(a.seq_id, 100, 101), (b.seq_id, 99, 100)]


def test_a_follower_goes_on_from_its_own_conversation_saved_past_the_shared_part() -> None:
    world = World(cells=1000, ram=1 << 20)
    system = list(range(RAM_TAIL))  # long enough that its cells are not saved apart
    a = world.start(system)  # the shared system prompt, read first and running
    while a.reading:
        world.step(a)
    world.step(a)
    # another conversation with that system prompt, saved earlier as a tail past it: it
    # shared a's cells, so only its own 40 went to RAM (through the scratch id)
    mine = [*system, *range(500, 540)]
    assert world.host is not None
    tail = world.cache.new_id()
    world.cache.will_share(tail, Hit(a.seq_id, RAM_TAIL))
    world.cache.reserve(tail, RAM_TAIL + 40)
    world.memory.cells[tail] = set(range(RAM_TAIL + 40))
    assert world.host.save(tail, mine) == 40 * POSITION_BYTES
    world.cache.retire(tail)
    b = world.start([*mine, 9])
    world.step(a, b, budget=0)  # beside a decoding sequence: no prompt token read
    # the saved tail begins past what b holds at admission: it follows a (already past
    # the shared tokens) into them, and from there its own tail comes back from RAM
    assert ("copy", a.seq_id, b.seq_id, 0, RAM_TAIL) in world.memory.calls
    assert b.leader is None and b.decoded == len(mine) and world.host.ram.hits == 1
    assert b.seq.cached_tokens == len(mine)
    assert world.memory.cells[b.seq_id] == set(range(len(mine)))


def test_a_short_common_beginning_makes_no_leader() -> None:
    world = World()
    a = world.start([*range(16), *range(100, 140)])
    b = world.start([*range(15), *range(200, 240)])  # 15 tokens in common: fewer than 16
    world.step(a, b)  # both read their prompts
    assert b.leader is None
    c = world.start([*range(16), *range(300, 340)])
    world.step(a, b, c, budget=0)  # beside a decoding sequence: no prompt token read
    assert c.leader is a and c.shared == 16 and a.leader is None  # the older one leads


def finished(world: World, tokens: list[int]) -> Slot:
    """A sequence that read `tokens` and finished: its cells are a prefix entry."""
    slot = world.start(tokens)
    while slot.reading or slot.decoded < len(tokens):
        world.step(slot)
    world.release(slot)
    return slot


def test_a_prompt_sharing_part_of_an_entry_starts_from_it_and_the_entry_stays() -> None:
    world = World()
    a = finished(world, list(range(50)))
    b = world.start([*range(30), *range(900, 920)])
    plan = world.step(b)
    assert spans(plan) == [(b.seq_id, 30, 50)] and b.seq.cached_tokens == 30
    assert world.cache.prefixes.ids() == [a.seq_id]  # kept for others
    assert world.memory.cells[b.seq_id] >= set(range(30))
    # its 30 shared cells are counted once, with the entry
    assert world.cache.ledger.base(b.seq_id) == (a.seq_id, 30)
    assert world.cache.ledger.reserved == 50 + (57 - 30)
    assert world.cache.stats()["prefix_hits"] == 1


def test_a_prompt_that_covers_an_entry_whole_takes_its_cells_over() -> None:
    world = World()
    a = finished(world, list(range(50)))
    b = world.start([*range(50), 7, 8])
    world.step(b)
    assert world.cache.prefixes.ids() == [] and world.cache.promised(a.seq_id) == 0
    assert b.seq.cached_tokens == 50 and world.cache.ledger.reserved == 59


def test_on_a_window_model_sized_per_sequence_an_entry_started_from_is_let_go() -> None:
    world = World(memory=Memory.WINDOW, checkpoints=2)
    a = finished(world, list(range(50)))
    b = world.start([*range(30), *range(900, 920)])
    world.step(b)
    # its window state could be cut back to 30 only through a checkpoint: none there,
    # so b reads from the start; the entry is let go all the same (never shared)
    assert world.cache.prefixes.ids() == [] and world.memory.tokens(a.seq_id) == 0


def test_with_parking_an_entry_started_from_is_parked_after_with_its_tail_saved() -> None:
    world = World(flash=False, ram=1 << 20)
    a = finished(world, list(range(300)))
    b = world.start([*range(200), *range(900, 920)])
    world.step(b)  # b shares a's first 200 cells; a's entry is parked after b's first token
    assert world.host is not None and b.seq.cached_tokens == 200
    assert world.cache.prefixes.ids() == [a.seq_id] and world.host.ram.saves == 0
    assert world.cache.ledger.base(b.seq_id) == (a.seq_id, 200)
    world.step(b)
    assert world.cache.prefixes.ids() == []
    # a's 100 tokens past the shared 200, and those 200 apart (fewer than RAM_TAIL)
    assert world.host.ram.saves == 2 and world.host.ram.covers(list(range(200)), RAM_TAIL)
    assert world.memory.tokens(a.seq_id) == 0
    # the shared cells stay, b's alone now, counted with it
    assert world.memory.cells[b.seq_id] >= set(range(200))
    assert world.cache.ledger.base(b.seq_id) is None
    assert world.cache.ledger.reserved == world.cache.promised(b.seq_id)


def test_an_entry_a_waiting_sequence_would_start_from_is_not_parked() -> None:
    world = World(cells=200, flash=False, ram=1 << 20)
    a = finished(world, list(range(40)))
    big = world.start(list(range(500, 600)))  # not like a: its admission parks a ...
    waiting = world.start([*range(40), *range(700, 760)])  # ... unless this one waits for it
    world.step(big, waiting)
    assert big.admitted and not waiting.admitted  # 107 + 40 + 67 cells: more than 200
    assert world.cache.prefixes.ids() == [a.seq_id]
    # it was promised nothing, and shares nothing, while it waits
    assert world.cache.promised(waiting.seq_id) == 0
    assert world.cache.ledger.base(waiting.seq_id) is None
    world.release(waiting)
    other = world.start(list(range(900, 910)))  # nobody waits for a now: parked
    world.step(big, other)
    world.step(big, other)  # (after other's first token)
    assert world.cache.prefixes.ids() == [] and world.memory.tokens(a.seq_id) == 0


def test_each_release_is_counted_and_a_sequence_that_read_nothing_leaves_no_entry() -> None:
    world = World()
    a, b = world.start(list(range(30))), world.start(list(range(40, 70)))
    world.release(a)  # never admitted
    world.release(b)
    assert world.planner.stats()["released"] == 2
    assert world.cache.prefixes.ids() == [] and world.cache.new_id() == b.seq_id
    nothing_kept = World(cache_tokens=0)
    c = finished(nothing_kept, list(range(30)))
    assert nothing_kept.cache.prefixes.ids() == [] and nothing_kept.memory.tokens(c.seq_id) == 0


def test_preemptions_are_counted_one_by_one() -> None:
    world = World(cells=60, reserve_step=4, cache_tokens=0)
    a = world.start(list(range(20)), max_tokens=None)
    b = world.start(list(range(100, 120)), max_tokens=None)
    c = world.start(list(range(200, 210)), max_tokens=None)
    until_preempted(world, a, b, c, times=2)
    assert world.planner.preemptions == 2


def test_no_leader_where_a_running_sequence_shares_no_more_than_it_holds() -> None:
    world = World()
    finished(world, list(range(40)))
    a = world.start([*range(40), *range(500, 540)])
    world.step(a)
    b = world.start([*range(40), *range(800, 840)])  # a shares its 40 with b: no more
    world.step(a, b, budget=0)  # beside a decoding sequence: no prompt token read
    assert b.decoded == 40 and b.leader is None
    assert world.cache.stats()["prefix_hits"] == 2  # a's and b's, from the entry


def test_a_bounded_request_is_promised_all_it_can_need_at_once() -> None:
    world = World(reserve_step=16)
    bounded = world.start(list(range(30)), max_tokens=100)
    unbounded = world.start(list(range(100, 130)), max_tokens=None)
    world.step(bounded, unbounded)
    assert world.cache.promised(bounded.seq_id) == 30 + 99
    assert world.cache.promised(unbounded.seq_id) == 30 + 16


def test_beside_decoding_sequences_a_prompt_reads_what_the_batch_has_left() -> None:
    world = World()
    a, b = world.start(list(range(10))), world.start(list(range(100, 110)))
    world.step(a, b)
    c = world.start(list(range(200, 300)))
    plan = world.step(a, b, c, budget=N_BATCH)
    assert spans(plan)[2] == (c.seq_id, 0, N_BATCH - 2)


def test_prompts_read_in_one_step_share_the_batch() -> None:
    world = World()
    a = world.start(list(range(100)))
    world.step(a)  # 0..64
    b = world.start(list(range(200, 300)))
    assert spans(world.step(a, b)) == [(a.seq_id, 64, 100), (b.seq_id, 0, 28)]


def test_a_waiting_follower_does_not_hold_up_the_prompts_behind_it() -> None:
    world = World()
    prompt = list(range(40))
    a, b, c = world.start(prompt), world.start(prompt), world.start(list(range(500, 600)))
    plan = world.step(a, b, c)
    assert b.leader is a
    assert spans(plan) == [(a.seq_id, 0, 40), (c.seq_id, 0, N_BATCH - 40)]


def test_a_sequence_grows_when_its_next_token_has_no_promised_cell() -> None:
    world = World(reserve_step=4, cache_tokens=0)
    a = world.start(list(range(20)), max_tokens=None)
    world.step(a)
    seen = []
    for _ in range(6):
        before = a.decoded
        world.step(a)
        seen.append((before, world.cache.promised(a.seq_id)))
    # promised 24 cells: positions 20..23 decode within them, position 24 needs 4 more
    assert seen == [(20, 24), (21, 24), (22, 24), (23, 24), (24, 28), (25, 28)]


def test_a_prompt_identical_to_an_entry_takes_its_cells_over() -> None:
    world = World()
    finished(world, list(range(50)))
    b = world.start(list(range(50)))  # all but its last token from the entry
    c = world.start(list(range(300, 320)))
    world.step(b, c)
    assert world.cache.prefixes.ids() == [] and b.seq.cached_tokens == 49
    assert c.admitted  # admitted in the same step, after b


def test_a_prompt_two_tokens_short_of_an_entry_leaves_it_kept() -> None:
    world = World()
    a = finished(world, list(range(50)))
    b = world.start([*range(48), 998, 999])
    world.step(b)
    assert world.cache.prefixes.ids() == [a.seq_id] and b.seq.cached_tokens == 48


def test_a_prompt_that_does_not_fit_beside_the_entry_it_shares_part_of_takes_it_over() -> None:
    world = World(cells=70)
    finished(world, list(range(50)))
    b = world.start([*range(30), *range(900, 920)])  # 57 cells: 50 + 27 are more than 70
    plan = world.step(b)
    assert world.cache.prefixes.ids() == [] and b.seq.cached_tokens == 30
    assert spans(plan) == [(b.seq_id, 30, 50)] and world.cache.ledger.reserved == 57


def test_idle_entries_are_parked_only_when_a_sequence_is_admitted() -> None:
    world = World(flash=False, ram=1 << 20)
    running = world.start(list(range(500, 520)))
    world.step(running)
    a = finished(world, list(range(40)))
    world.step(running)  # no admission: nothing parked
    assert world.cache.prefixes.ids() == [a.seq_id]


def test_a_follower_copies_its_leader_as_soon_as_the_leader_has_the_shared_tokens() -> None:
    world = World()
    a = world.start(list(range(60)))
    b = world.start([*range(60), *range(700, 720)])
    assert spans(world.step(a, b)) == [(a.seq_id, 0, 60)]  # b waits for its 60
    plan = world.step(a, b)
    assert (b.seq_id, 60, 80) in spans(plan) and b.seq.cached_tokens == 60


def test_a_follower_that_started_from_an_entry_counts_only_what_its_leader_adds() -> None:
    world = World()
    finished(world, list(range(20)))
    prompt = [*range(20), *range(100, 160)]
    a = world.start(prompt)
    world.step(a)  # a starts from the entry (20) and reads the rest
    b = world.start(prompt)
    world.step(a, b)  # b starts from... the entry went to a: from a, as a follower
    stats = world.cache.stats()
    assert b.seq.cached_tokens == 79 and stats["prefix_tokens"] == 20 + 79


def test_drafts_take_their_part_of_the_batch_before_prompts_do() -> None:
    world = World(draft_length=4)
    a = world.start([1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3], max_tokens=20)
    a.ngrams = NgramIndex()
    world.step(a)
    a.tokens[-1] = 1  # it sampled what began the pattern: a draft follows it
    c = world.start(list(range(200, 300)))
    plan = world.step(a, c)
    assert a.draft == [2, 3, 1]  # what followed the pattern's last occurrence
    assert spans(plan) == [(a.seq_id, 12, 13), (c.seq_id, 0, N_BATCH - 1 - 3)]


def test_drafts_the_policy_chooses_wait_for_a_step_that_reads_no_prompt() -> None:
    """A draft token costs about what a prompt token does: in a step that reads another
    request's prompt it would put off that request's first token."""
    world = World(speculative=True)
    for tokens in range(1, 40):  # steps cost little more for more tokens: drafts pay
        world.planner.speculation.costs.observe(tokens, 0.050 + 0.001 * tokens)
    a = world.start([1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3], max_tokens=40)
    a.ngrams, a.accept_rate = NgramIndex(), 0.9
    world.step(a)
    c = world.start(list(range(200, 300)))
    for _ in range(3):
        a.tokens[-1] = 1  # it sampled what began the pattern: a draft would follow it
        plan = world.step(a, c)
        assert a.draft == [] and any(run.slot is c for run in plan.runs)
        if not c.reading:
            break
    assert not c.reading
    a.tokens[-1] = 1
    world.step(a, c)
    assert a.draft  # no prompt in this step: the policy drafts again


def test_a_length_is_tried_by_a_sequence_that_has_a_guess() -> None:
    """The likeliest sequence has nothing to guess from (no n-gram of its own repeats):
    the unmeasured length is tried by the one that has a guess, not left untried while
    the likeliest drafts nothing every step."""
    world = World(speculative=True)
    world.planner.speculation.costs.observe(2, 0.02)
    world.planner.speculation.costs.observe(3, 0.03)
    a = world.start(list(range(300, 312)), max_tokens=40)
    b = world.start([1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3], max_tokens=40)
    a.ngrams, a.accept_rate = NgramIndex(), 0.95
    b.ngrams, b.accept_rate = NgramIndex(), 0.5
    world.step(a, b)
    b.tokens[-1] = 1  # it sampled what began its pattern: a guess follows it
    world.step(a, b)
    assert a.draft == [] and b.draft[:2] == [2, 3]


def test_a_sequence_that_holds_what_a_running_one_shares_with_it_follows_nobody() -> None:
    world = World()
    finished(world, list(range(60)))
    a = world.start([*range(40), *range(100, 140)])  # 40 from the entry, which stays
    world.step(a)
    b = world.start([*range(40), *range(200, 240)])  # 40 from the entry too; a adds none
    world.step(a, b)
    assert b.seq.cached_tokens == 40 and b.leader is None
    assert world.cache.stats()["prefix_hits"] == 2


def test_a_follower_counts_as_reused_only_what_its_leader_adds_to_what_it_had() -> None:
    world = World()
    finished(world, list(range(25)))
    prompt = [*range(20), *range(100, 160)]  # 20 in common with the entry, which stays
    a = world.start(prompt)
    world.step(a)
    b = world.start(prompt)
    world.step(a, b)  # b starts from the entry's 20, then copies a's 79
    assert b.seq.cached_tokens == 79
    assert world.cache.stats()["prefix_tokens"] == 20 + 20 + (79 - 20)


def test_a_preempted_sequence_reads_its_tokens_again_past_its_prompts_checkpoint() -> None:
    world = World(cells=60, reserve_step=4, cache_tokens=0, memory=Memory.WINDOW, checkpoints=2)
    a = world.start(list(range(20)), max_tokens=None)
    b = world.start(list(range(100, 120)), max_tokens=None)
    until_preempted(world, a, b)
    assert not b.admitted
    known = len(b.tokens)  # its prompt and what it sampled before
    world.release(a)
    # it stops at its prompt's last point (a checkpoint there), then reads the rest
    assert spans(world.step(b)) == [(b.seq_id, 0, 19)]
    assert spans(world.step(b)) == [(b.seq_id, 19, known)]


class SlowSaves(StandInMemory):
    """Saves that take `seconds` each on the clock parks are timed with, as a large
    state's copy out of a GPU would."""

    seconds = 0.05

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def read_state(self, seq_id: int, flags: int, most: int | None = None) -> bytearray | None:
        self.now += self.seconds
        return super().read_state(seq_id, flags, most)


def parking_world(per_token: float, memory: SlowSaves | None = None) -> World:
    """A world that parks, whose prompt tokens cost `per_token` seconds to read, for a
    model whose cell adds a thousandth of that to each token read beside it; its parks
    timed on `memory`'s clock, where it is given."""
    world = World(cells=2000, flash=False, ram=1 << 20)
    clock = time.perf_counter
    if memory is not None:
        world.memory = world.cache.memory = memory
        assert world.host is not None
        world.host.memory = memory
        clock = lambda: memory.now  # noqa: E731
    world.planner.parking = Parking(0.001, lambda: per_token, clock)
    if world.host is not None:
        world.host.parking = world.planner.parking
    return world


def reads(world: World, since: int) -> list[tuple[object, ...]]:
    return [c for c in world.memory.calls[since:] if c[0] == "read_state"]


def test_a_prompt_is_not_kept_waiting_for_slow_saves_of_idle_entries() -> None:
    """Saves that cost more than reading beside the idle cells (timed as they happen):
    a new prompt's first token is sampled before any of them, and they are made in the
    steps after, a bounded amount a step."""
    world = parking_world(per_token=0.001, memory=SlowSaves())
    first = finished(world, list(range(50)))
    other = world.start(list(range(300, 340)))
    world.step(other)
    world.step(other)  # a first park, timed: slow
    world.release(other)
    assert world.memory.tokens(first.seq_id) == 0
    save = world.planner.parking.save
    assert save is not None and save * 50 >= SlowSaves.seconds
    kept = [other, *(finished(world, list(range(k, k + 50))) for k in (1000, 2000))]
    deferred = world.planner.parking.deferred
    b = world.start(list(range(500, 540)))
    since = len(world.memory.calls)
    plan = world.step(b)  # b's first token: no save before it
    assert spans(plan) == [(b.seq_id, 0, 40)] and reads(world, since) == []
    assert world.planner.parking.deferred == deferred + 1
    world.planner.park_step = 50 * save  # the seconds a step may park: one entry's
    for left in (2, 1, 0):  # then the parks, one entry a step
        since = len(world.memory.calls)
        world.step(b)
        assert len(reads(world, since)) == 1 and len(world.cache.prefixes) == left
    assert not world.planner.parking.due
    assert all(world.memory.tokens(k.seq_id) == 0 for k in kept)


def test_idle_entries_are_parked_ahead_of_a_prompt_that_would_cost_more_read_beside_them() -> None:
    world = parking_world(per_token=0.001)
    world.planner.parking.save = 1e-6  # a cell saved in a microsecond: reading beside costs more
    kept = finished(world, list(range(50)))
    b = world.start(list(range(500, 540)))
    since = len(world.memory.calls)
    world.step(b)
    assert world.memory.tokens(kept.seq_id) == 0 and len(reads(world, since)) == 1
    assert world.planner.parking.deferred == 0


def test_an_entry_whose_tail_ram_cannot_take_stays_in_the_cache() -> None:
    """Found in review: where RAM took a parked entry's shared head but not its tail, the
    entry was let go all the same, and its conversation's turns were lost."""
    world = World(cells=3000, flash=False, ram=1000 * POSITION_BYTES)
    finished(world, list(range(5000, 5700)))  # parked first: 700 of the room
    finished(world, list(range(600)))
    b = world.start([*range(20), *range(900, 960)])  # shares its 20 template tokens
    for _ in range(3):
        world.step(b)
    world.release(b)
    c = world.start([*range(600), 7, 8])  # its next turn
    world.step(c)
    assert c.seq.cached_tokens == 600


def test_a_parked_conversation_comes_back_after_another_with_its_template_is_parked() -> None:
    """Found in review: a conversation saved whole, which begins with the template tokens
    another's saved tail begins after, pushed that shared head out of RAM; the tail could
    then come back only through the whole other conversation, or not at all."""
    world = World(cells=2600, flash=False, ram=1 << 20)
    finished(world, list(range(600)))
    b = world.start([*range(20), *range(5000, 6500)])
    while b.reading:
        world.step(b)
    world.step(b)  # the first: its head [0, 20) and its tail [20, 600) saved apart
    world.release(b)
    x = world.start(list(range(9000, 10200)), max_tokens=None)
    while x.reading:
        world.step(x)
    world.step(x)
    world.step(x)  # b parked whole: it holds the head too
    assert world.host is not None and world.host.ram.covers(list(range(20)), RAM_TAIL)
    c = world.start([*range(600), 7, 8])
    world.step(x, c)
    assert c.seq.cached_tokens == 600


def test_a_prompt_whose_client_lags_does_not_hold_the_parks_back() -> None:
    world = World(flash=False, ram=1 << 20)
    kept = finished(world, list(range(50)))
    lagging = world.start(list(range(500, 540)))
    running = world.start(list(range(700, 710)))
    world.step(running)  # both admitted; only running is stepped (lagging's client lags)
    world.step(running)
    assert lagging.admitted and lagging.reading
    assert world.memory.tokens(kept.seq_id) == 0  # parked all the same


def test_a_few_more_tokens_from_a_small_parked_state_are_restored_where_that_costs_less() -> None:
    """Where reading a token is measured to cost what hundreds of cells' copies do (a
    small model on a CPU), the few tokens a new prompt shares with a parked conversation
    (a question's first words) are restored rather than read; before anything is
    measured, a few tokens of a larger state are read."""
    measured: list[tuple[float | None, int]] = [(None, 0), (0.004, 41)]
    for per_token, gained in measured:
        world = World(cells=2000, flash=False, ram=1 << 20)
        world.parking = world.planner.parking = Parking(0.001, functools.partial(id_, per_token))
        assert world.host is not None
        world.host.parking = world.parking
        world.parking.save = 1e-5
        a = finished(world, [*range(41), *range(500, 620)])
        b = world.start(list(range(200, 210)))  # another conversation: a is parked
        world.step(b)
        world.step(b)
        assert world.memory.tokens(a.seq_id) == 0
        c = world.start([*range(41), *range(700, 720)])
        world.step(b, c)
        assert c.seq.cached_tokens == gained


def id_(value: float | None) -> float | None:
    return value


def test_a_prompt_cached_but_its_last_token_still_has_its_first_token_before_the_parks() -> None:
    """Found measuring eight repeated chat requests: a prompt restored whole but its last
    token reads nothing more, yet it waits for its first token all the same."""
    world = parking_world(per_token=0.001, memory=SlowSaves())
    world.planner.parking.save = 1.0  # saves measured slow: parks wait
    kept = finished(world, list(range(50)))
    again = finished(world, list(range(300, 340)))  # (kept as an entry, ...)
    c = world.start([*range(300, 340), 9])  # ... from which this one reads its last token
    since = len(world.memory.calls)
    plan = world.step(c)
    assert spans(plan) == [(c.seq_id, 40, 41)] and reads(world, since) == []
    assert world.memory.tokens(kept.seq_id) > 0 and again.seq_id != c.seq_id
    world.step(c)  # after its first token
    assert world.memory.tokens(kept.seq_id) == 0
