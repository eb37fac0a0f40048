"""The engine's decode loop on its own thread, feeding a real Outbox on an event loop."""

from __future__ import annotations

import asyncio
import threading

from coderai.bus.codec import decode
from coderai.bus.messages import Chunks, Done, EngineConfig, Fail, Job, Message, ModelSpec, Tokens
from coderai.engine.backends.base import LoadProgress, ModelInstance, Sequence
from coderai.engine.backends.fake import FakeBackend, fake_tokens
from coderai.engine.holdings import Report
from coderai.engine.outbox import Outbox
from coderai.engine.scheduler import Scheduler
from tests.support.bus import text_of


def _job(job_id: int, options: dict[str, object], max_tokens: int | None = None) -> Job:
    model = {"id": "f", "path": "", "format": "fake", "options": options}
    return Job(job_id, model, "completion", f"prompt {job_id}", max_tokens=max_tokens)


async def _run(
    jobs: list[Job],
    until_done: int,
    cancel_after: float | None = None,
    seen: list[int] | None = None,
    reconfigure: tuple[int, EngineConfig] | None = None,
) -> list[Message]:
    """Run jobs to their ends. With cancel_after, the first job is cancelled once it has
    produced about that many seconds of tokens; `seen` gets its token count at that moment.
    With reconfigure (n, settings), the settings follow the first n jobs."""
    received: list[Message] = []
    outbox = Outbox(asyncio.get_running_loop())
    scheduler = Scheduler({"fake": FakeBackend()}, outbox, slots=4)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()

    async def send(frames: list[bytes]) -> None:
        received.append(decode(frames))

    sender = asyncio.create_task(outbox.run(send))
    for i, job in enumerate(jobs):
        if reconfigure is not None and i == reconfigure[0]:
            scheduler.configure(reconfigure[1])
        scheduler.submit(job)
    if cancel_after is not None:
        await asyncio.sleep(cancel_after)
        # read across threads: an int read is atomic, and it only grows
        running = scheduler._jobs.get(jobs[0].job_id)
        if seen is not None and running is not None:
            seen.append(running.completion_tokens)
        scheduler.cancel(jobs[0].job_id)
    async with asyncio.timeout(10):
        while sum(isinstance(m, Done | Fail) for m in received) < until_done:
            await asyncio.sleep(0.005)
    scheduler.stop()
    thread.join(5)
    sender.cancel()
    return received


def test_jobs_run_together_and_each_gets_its_exact_text() -> None:
    jobs = [_job(i, {"output_tokens": 50}) for i in (1, 2, 3)]
    received = asyncio.run(_run(jobs, until_done=3))
    for i in (1, 2, 3):
        assert text_of(received, i) == "".join(fake_tokens(f"prompt {i}", 0, 50))
    dones = {m.job_id: m for m in received if isinstance(m, Done)}
    assert {d.finish_reason for d in dones.values()} == {"stop"}
    # one CHUNKS message carries the deltas of several jobs
    assert any(isinstance(m, Chunks) and len(m.deltas) > 2 for m in received)


def test_max_tokens_ends_with_length() -> None:
    received = asyncio.run(_run([_job(1, {}, max_tokens=7)], until_done=1))
    (done,) = [m for m in received if isinstance(m, Done)]
    assert (done.finish_reason, done.completion_tokens) == ("length", 7)


def test_a_context_that_fills_ends_with_length_at_its_room() -> None:
    # "prompt 1" is two fake tokens, so a 9-token context has room for 7 more
    received = asyncio.run(_run([_job(1, {"context": 9})], until_done=1))
    (done,) = [m for m in received if isinstance(m, Done)]
    assert (done.finish_reason, done.completion_tokens) == ("length", 7)
    assert text_of(received, 1) == "".join(fake_tokens("prompt 1", 0, 7))


def test_max_tokens_below_the_room_still_wins() -> None:
    received = asyncio.run(_run([_job(1, {"context": 9}, max_tokens=3)], until_done=1))
    (done,) = [m for m in received if isinstance(m, Done)]
    assert (done.finish_reason, done.completion_tokens) == ("length", 3)


def test_cancel_takes_effect_within_one_step() -> None:
    tps = 20  # a step every 50 ms
    job = _job(1, {"tokens_per_second": tps, "output_tokens": 1000})
    seen: list[int] = []
    received = asyncio.run(_run([job], until_done=1, cancel_after=0.3, seen=seen))
    (done,) = [m for m in received if isinstance(m, Done)]
    assert done.finish_reason == "cancelled"
    # the scheduler reads its inbox before every step: the step under way when the
    # cancel arrived is the last one, however loaded the machine
    (at_cancel,) = seen
    assert at_cancel <= done.completion_tokens <= at_cancel + 1


def test_a_failing_job_does_not_harm_its_neighbour() -> None:
    jobs = [_job(1, {"fail_after_tokens": 2}), _job(2, {"output_tokens": 10})]
    received = asyncio.run(_run(jobs, until_done=2))
    (fail,) = [m for m in received if isinstance(m, Fail)]
    assert (fail.job_id, fail.kind) == (1, "model_error")
    assert text_of(received, 2) == "".join(fake_tokens("prompt 2", 0, 10))


def test_unsupported_format_fails_the_job() -> None:
    job = Job(1, {"id": "g", "path": "x.gguf", "format": "gguf", "options": {}}, "completion", "p")
    received = asyncio.run(_run([job], until_done=1))
    (fail,) = [m for m in received if isinstance(m, Fail)]
    assert fail.kind == "unsupported"


def test_more_jobs_than_slots_are_refused_as_busy() -> None:
    jobs = [_job(i, {"tokens_per_second": 50, "output_tokens": 5}) for i in range(1, 6)]
    received = asyncio.run(_run(jobs, until_done=5))
    busy = [m for m in received if isinstance(m, Fail)]
    assert [(m.job_id, m.kind) for m in busy] == [(5, "busy")]


def test_fewer_slots_let_the_jobs_running_finish_and_refuse_new_ones() -> None:
    jobs = [_job(i, {"tokens_per_second": 50, "output_tokens": 5}) for i in (1, 2, 3)]
    received = asyncio.run(_run(jobs, until_done=3, reconfigure=(2, EngineConfig(slots=1))))
    assert sorted(m.job_id for m in received if isinstance(m, Done)) == [1, 2]
    assert [(m.job_id, m.kind) for m in received if isinstance(m, Fail)] == [(3, "busy")]


def test_a_tokenize_job_is_answered_with_its_ids_and_the_context_before_its_done() -> None:
    model = {"id": "f", "path": "", "format": "fake", "options": {"context": 64}}
    received = asyncio.run(_run([Job(1, model, "tokenize", "hi")], until_done=1))
    answer, done = received
    assert answer == Tokens(1, ids=[104, 105], context=64)
    assert isinstance(done, Done)
    assert (done.prompt_tokens, done.completion_tokens) == (2, 0)


def test_a_detokenize_job_is_answered_with_its_text_or_fails_on_an_unknown_id() -> None:
    model = {"id": "f", "path": "", "format": "fake", "options": {}}
    jobs = [Job(1, model, "detokenize", prompt_ids=[104, 105]),
            Job(2, model, "detokenize", prompt_ids=[104, 999])]  # fmt: skip
    received = asyncio.run(_run(jobs, until_done=2))
    assert Tokens(1, text="hi") in received
    (fail,) = [m for m in received if isinstance(m, Fail)]
    assert (fail.job_id, fail.kind) == (2, "bad_request")
    assert "999" in fail.message


class _Telling(FakeBackend):
    """Fake instances of model "told" that keep prefixes: a prompt's lead is its length
    here, and their caches keep the lead 9; the others keep none, as the fake backend's."""

    def load(self, spec: ModelSpec, progress: LoadProgress) -> ModelInstance:
        instance = super().load(spec, progress)
        if spec.id == "told":
            start = instance.start

            def starting(seq: Sequence) -> None:
                start(seq)
                seq.lead = len(seq.job.prompt)

            instance.start = starting  # type: ignore[method-assign]
            instance.leads = lambda: {9}  # type: ignore[method-assign]
        return instance


def _chat(job_id: int, model_id: str, affinity: str, prompt: str) -> Job:
    model = {"id": model_id, "path": "", "format": "fake", "options": {"tokens_per_second": 5}}
    return Job(job_id, model, "completion", prompt, affinity=affinity)


def test_the_holds_report_names_running_conversations_first_and_the_last_job_taken() -> None:
    async def run() -> tuple[tuple[int, dict[str, Report]], tuple[int, dict[str, Report]]]:
        outbox = Outbox(asyncio.get_running_loop())
        scheduler = Scheduler({"fake": _Telling()}, outbox, slots=4)
        thread = threading.Thread(target=scheduler.run, daemon=True)
        thread.start()
        sender = asyncio.create_task(outbox.run(lambda frames: asyncio.sleep(0)))
        scheduler.submit(_chat(5, "told", "running", "a" * 5))
        scheduler.submit(_chat(9, "told", "cached", "b" * 9))  # its lead is kept as well
        scheduler.submit(_chat(7, "silent", "unheard", "c" * 9))  # keeps no prefix
        async with asyncio.timeout(10):
            while scheduler.holds[0] != 7 or "told" not in scheduler.holds[1]:
                await asyncio.sleep(0.01)
        before = scheduler.holds
        ended = threading.Event()
        scheduler.cancel_all(ended)  # the front is gone: the next JOB is a new front's
        await asyncio.to_thread(ended.wait, 5)
        async with asyncio.timeout(10):
            while scheduler.holds[0] != 0:
                await asyncio.sleep(0.01)
        after = scheduler.holds
        scheduler.stop()
        thread.join(5)
        sender.cancel()
        return before, after

    before, after = asyncio.run(run())
    # the taken job is the last one taken, not the highest id
    assert before == (7, {"told": Report(["cached", "running"], cut=False)})  # latest first
    # once the jobs ended, only the conversation whose lead the caches keep
    assert after == (0, {"told": Report(["cached"], cut=False)})
