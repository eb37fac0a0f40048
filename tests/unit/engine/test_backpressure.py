"""A held job (its client lags) stops in the engine: the scheduler steps it no more where the
backend allows, and the outbox keeps back what it has, DONE included, until it is resumed."""

from __future__ import annotations

import asyncio
import threading

from coderai.bus.codec import decode
from coderai.bus.messages import Chunks, Done, Job, Message
from coderai.engine.backends.fake import FakeBackend, fake_tokens
from coderai.engine.outbox import Delta, Outbox
from coderai.engine.scheduler import Scheduler
from tests.support.bus import text_of


async def _until(cond: object, what: str) -> None:
    async with asyncio.timeout(10):
        while not cond():  # type: ignore[operator]
            await asyncio.sleep(0.002)


def test_outbox_keeps_a_held_jobs_output_and_done_until_resumed() -> None:
    async def scenario() -> list[Message]:
        sent: list[Message] = []

        async def send(frames: list[bytes]) -> None:
            sent.append(decode(frames))

        outbox = Outbox(asyncio.get_running_loop())
        runner = asyncio.create_task(outbox.run(send))
        outbox.hold(1)
        outbox.publish([(1, "held "), (2, "free")], [])
        outbox.publish([(1, "text")], [Done(1, "stop", 1, 2), Done(2, "stop", 1, 1)])
        await _until(lambda: any(isinstance(m, Done) and m.job_id == 2 for m in sent), "job 2")
        assert text_of(sent, 1) == ""
        assert not any(isinstance(m, Done) and m.job_id == 1 for m in sent)
        outbox.resume(1)
        await _until(lambda: any(isinstance(m, Done) and m.job_id == 1 for m in sent), "job 1")
        runner.cancel()
        return sent

    sent = asyncio.run(scenario())
    assert text_of(sent, 1) == "held text"
    # its text leaves before its DONE
    last_chunk = max(i for i, m in enumerate(sent) if isinstance(m, Chunks) and 1 in m.deltas)
    done = next(i for i, m in enumerate(sent) if isinstance(m, Done) and m.job_id == 1)
    assert last_chunk < done


def test_a_held_sequence_is_not_stepped_until_resumed() -> None:
    tokens = 400

    async def scenario() -> tuple[int, int, list[Message]]:
        sent: list[Message] = []

        async def send(frames: list[bytes]) -> None:
            sent.append(decode(frames))

        outbox = Outbox(asyncio.get_running_loop())
        scheduler = Scheduler({"fake": FakeBackend()}, outbox, slots=4)
        thread = threading.Thread(target=scheduler.run, daemon=True)
        thread.start()
        runner = asyncio.create_task(outbox.run(send))
        # 200 tokens/s: the hold lands long before the job could end by itself
        model = {"id": "f", "path": "", "format": "fake",
                 "options": {"tokens_per_second": 200, "output_tokens": tokens}}  # fmt: skip
        scheduler.submit(Job(1, model, "completion", "p"))
        await _until(lambda: len(text_of(sent, 1)) > 0, "first token")
        scheduler.hold(1)
        outbox.hold(1)
        # a second job runs to its end meanwhile: the scheduler went on stepping
        scheduler.submit(Job(2, {**model, "options": {"output_tokens": 5}}, "completion", "q"))
        await _until(lambda: any(isinstance(m, Done) and m.job_id == 2 for m in sent), "job 2")
        held_at = scheduler._jobs[1].completion_tokens
        # one more pass of the loop after the hold: nothing is stepped for the held job
        scheduler.submit(Job(3, {**model, "options": {"output_tokens": 5}}, "completion", "r"))
        await _until(lambda: any(isinstance(m, Done) and m.job_id == 3 for m in sent), "job 3")
        still = scheduler._jobs[1].completion_tokens
        scheduler.resume(1)
        outbox.resume(1)
        await _until(lambda: any(isinstance(m, Done) and m.job_id == 1 for m in sent), "job 1")
        scheduler.stop()
        thread.join(5)
        runner.cancel()
        return held_at, still, sent

    held_at, still, sent = asyncio.run(scenario())
    assert held_at == still < tokens
    assert text_of(sent, 1) == "".join(fake_tokens("p", 0, tokens))


def test_output_published_while_held_output_is_put_back_comes_after_it() -> None:
    """The scheduler thread may publish between the loop taking the batch and putting a
    held job's part of it back: the new text must follow the held text, not replace it."""

    async def scenario() -> list[Message]:
        sent: list[Message] = []

        async def send(frames: list[bytes]) -> None:
            sent.append(decode(frames))

        outbox = Outbox(asyncio.get_running_loop())
        split = outbox._split_held
        raced: list[bool] = []

        def racing(deltas: dict[int, list[Delta]], terminal: list[Message]) -> list[Message]:
            if not raced:  # once: as the scheduler thread would, between the two locks
                raced.append(True)
                outbox.publish([(1, " later")], [])
            return split(deltas, terminal)

        outbox._split_held = racing  # type: ignore[method-assign]
        outbox.hold(1)
        outbox.publish([(1, "held")], [])
        runner = asyncio.create_task(outbox.run(send))
        await _until(lambda: raced, "the racing publish")
        outbox.publish([], [Done(1, "stop", 1, 2)])
        outbox.resume(1)
        await _until(lambda: any(isinstance(m, Done) and m.job_id == 1 for m in sent), "job 1")
        runner.cancel()
        return sent

    assert text_of(asyncio.run(scenario()), 1) == "held later"
