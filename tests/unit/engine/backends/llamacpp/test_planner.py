"""The step planner on a stand-in for llama.cpp's sequence memory
(coderai/engine/backends/llamacpp/planner.py): admission, chunks, leaders, growth,
preemption, prefix entries and parking. A test moves a sequence on as the runner would
(`advance`), so no model is needed."""

from __future__ import annotations

import codecs
from typing import Any, cast

from coderai.bus.messages import Job
from coderai.engine.backends.base import Sequence
from coderai.engine.backends.llamacpp.cache_manager import CacheManager
from coderai.engine.backends.llamacpp.checkpoints import Memory
from coderai.engine.backends.llamacpp.host_tier import HostTier
from coderai.engine.backends.llamacpp.kv import cells_needed
from coderai.engine.backends.llamacpp.planner import Planner
from coderai.engine.backends.llamacpp.policy import cache_policy
from coderai.engine.backends.llamacpp.ram_cache import RamCache
from coderai.engine.backends.llamacpp.slot import Plan, Run, Slot
from coderai.engine.backends.llamacpp.speculation import Speculation
from tests.support.cells import StandInMemory

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
    ) -> None:
        cache_tokens = cells if cache_tokens is None else cache_tokens
        entries = parallel if cache_tokens else 0
        self.policy = cache_policy(memory, 8 if memory is Memory.WINDOW else 0,
                                   swa_full=False, flash=flash, host_ram=ram > 0,
                                   parallel=parallel, entries=entries, id_bound=64,
                                   checkpoints=checkpoints, checkpoint_every=32)  # fmt: skip
        self.memory = StandInMemory()
        self.cache = CacheManager(self.policy, self.memory, cells=cells, parallel=parallel,
                                  entries=entries, cache_tokens=cache_tokens)  # fmt: skip
        self.host = HostTier(RamCache(ram), self.cache) if ram else None
        speculation = Speculation(False, None, None, self.memory)
        self.planner = Planner(self.cache, self.host, speculation, n_batch=N_BATCH,
                               reserve_step=reserve_step)  # fmt: skip

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
    world.step(a, budget=0)  # both admitted, nothing read
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
    for _ in range(30):
        world.step(a, b)
        if world.planner.preemptions:
            break
    assert world.planner.preemptions == 1 and world.host is not None
    assert world.host.ram.saves == 1
    read = len(b.tokens) - 1
    world.release(a)
    world.step(b)
    assert b.admitted and world.host.ram.hits == 1 and b.decoded >= read


def test_idle_entries_are_parked_in_host_ram_without_flash_attention() -> None:
    world = World(flash=False, ram=1 << 20)
    assert world.policy.parks_idle
    a = world.start(list(range(50)))
    world.step(a)
    world.release(a)
    assert world.cache.prefixes.ids() == [a.seq_id]
    b = world.start(list(range(500, 540)))  # another conversation: a's entry is idle
    world.step(b)
    assert world.cache.prefixes.ids() == [] and world.host is not None
    assert world.host.ram.saves == 1 and world.memory.tokens(a.seq_id) == 0
    # a's conversation comes back: its state is restored rather than read
    c = world.start([*range(50), 1050, 3])
    plan = world.step(b, c)
    assert world.host.ram.hits == 1 and (c.seq_id, 50, 52) in spans(plan)


def test_a_few_tokens_in_common_with_a_parked_conversation_are_read_again() -> None:
    world = World(cells=2000, flash=False, ram=1 << 20)
    a = world.start(list(range(600)))
    while a.reading or a.decoded < 600:
        world.step(a)
    world.release(a)
    b = world.start([*range(20), *range(900, 960)])  # 20 of a's 601 tokens
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
    world.step(b, c, budget=0)
    assert world.cache.prefixes.ids() == []  # b took a's cells over
    assert b.decoded > 0 and c.leader is None  # c shares nothing with a running one


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
