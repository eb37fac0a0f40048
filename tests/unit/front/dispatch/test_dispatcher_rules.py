"""The dispatcher's queueing rules, on a real ROUTER socket with test peers as engines."""

from __future__ import annotations

import asyncio
from pathlib import Path

from coderai.bus.kinds import ControlAction
from coderai.bus.messages import (
    Bye,
    Cancel,
    Chunks,
    Control,
    Done,
    Fail,
    Heartbeat,
    Hold,
    Message,
    Ping,
    Resume,
)
from coderai.config import ServerConfig
from coderai.errors import EngineFailed, NoEngine
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.engines.host import Unhosted
from tests.support.bus import TOKEN, Peer, bus, job, until


def test_jobs_of_one_model_run_in_arrival_order(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        async with bus(tmp_path) as (dispatcher, endpoint):
            peer = Peer(endpoint, "e", slots=1)
            await peer.join()
            for i in (1, 2, 3):
                dispatcher.submit(job(i))
            order = await peer.job_ids(1)
            for _ in range(2):
                await peer.send(Done(order[-1], "stop", 1, 1))
                order += await peer.job_ids(1)
            peer.close()
            return order

    assert asyncio.run(scenario()) == [1, 2, 3]


def test_a_busy_answer_puts_the_job_back_at_the_head(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        async with bus(tmp_path) as (dispatcher, endpoint):
            peer = Peer(endpoint, "e", slots=1)
            await peer.join()
            dispatcher.submit(job(1))
            dispatcher.submit(job(2))
            assert await peer.job_ids(1) == [1]
            await peer.send(Fail(1, "busy", "no free slot"))
            again = await peer.job_ids(1)  # job 1 again, ahead of job 2
            await peer.send(Done(1, "stop", 1, 1))
            again += await peer.job_ids(1)
            peer.close()
            return again

    assert asyncio.run(scenario()) == [1, 2]


def test_jobs_of_a_lost_engine_run_elsewhere_in_their_order_ahead_of_the_queue(
    tmp_path: Path,
) -> None:
    async def scenario() -> list[int]:
        async with bus(tmp_path) as (dispatcher, endpoint):
            first = Peer(endpoint, "a", slots=2)
            await first.join()
            for i in (1, 2, 3):  # 1 and 2 run on "a", 3 waits
                dispatcher.submit(job(i))
            assert sorted(await first.job_ids(2)) == [1, 2]
            await first.send(Bye("leaving"))
            await until(lambda: not dispatcher.registry.all(), 5)
            second = Peer(endpoint, "b", slots=3)
            await second.join()
            order = await second.job_ids(3)
            first.close()
            second.close()
            return order

    assert asyncio.run(scenario()) == [1, 2, 3]


def test_a_job_that_moved_is_cancelled_on_and_named_for_the_engine_that_ran_it(
    tmp_path: Path,
) -> None:
    """Which engine runs a job is read from that engine's record alone: after its first
    engine left, the CANCEL goes to the second, the response names the second, and the
    job's credit there is given back when the engine confirms."""

    async def scenario() -> tuple[FrontJob, Message, bool, int, int]:
        async with bus(tmp_path) as (dispatcher, endpoint):
            first = Peer(endpoint, "a", slots=1)
            await first.join()
            moved = job(1)
            dispatcher.submit(moved)
            assert await first.job_ids(1) == [1]
            await first.send(Bye("leaving"))
            await until(lambda: not dispatcher.registry.all(), 5)
            second = Peer(endpoint, "b", slots=1)
            await second.join()
            assert await second.job_ids(1) == [1]
            (record,) = dispatcher.registry.all()
            on_second = dispatcher.engine_of(moved) is record
            dispatcher.cancel(moved)
            told = await second.recv()
            busy = record.free
            await second.send(Done(1, "cancelled", 1, 0))
            await until(lambda: moved.outcome is not None, 5)
            first.close()
            second.close()
            return moved, told, on_second, busy, record.free

    moved, told, on_second, busy, free = asyncio.run(scenario())
    assert on_second and told == Cancel(1)
    assert (busy, free) == (0, 1)
    assert moved.served_by == "b"


def test_drain_cancels_what_outlives_the_grace_and_counts_it(tmp_path: Path) -> None:
    async def scenario() -> tuple[int, list[FrontJob], list[Message]]:
        async with bus(tmp_path) as (dispatcher, endpoint):
            peer = Peer(endpoint, "e", slots=2)
            await peer.join()
            jobs = [job(1), job(2)]
            for j in jobs:
                dispatcher.submit(j)
            await peer.job_ids(2)
            await peer.send(Done(1, "stop", 1, 1))  # one ends within the grace
            await until(lambda: jobs[0].outcome is not None, 5)
            cancelled = await dispatcher.drain("e", grace=0.1)
            told = [await peer.recv()]
            peer.close()
            return cancelled, jobs, told

    cancelled, jobs, told = asyncio.run(scenario())
    assert cancelled == 1
    assert isinstance(jobs[0].outcome, Done)
    assert isinstance(jobs[1].outcome, EngineFailed)
    assert told == [Cancel(2)]


def test_a_queued_job_expires_after_queue_timeout(tmp_path: Path) -> None:
    timeout, interval = 0.3, 0.1

    async def scenario() -> tuple[FrontJob, float]:
        async with bus(tmp_path, queue_timeout=timeout, heartbeat_interval=interval) as (
            dispatcher,
            endpoint,
        ):
            peer = Peer(endpoint, "e", slots=1)
            await peer.join()
            dispatcher.submit(job(1))
            # timed from before the job exists: its own clock starts when it is made
            loop = asyncio.get_running_loop()
            start = loop.time()
            waiting = job(2)
            dispatcher.submit(waiting)
            # the reaper looks every half heartbeat interval
            await until(lambda: waiting.outcome is not None, timeout + interval + 5)
            waited = loop.time() - start
            peer.close()
            return waiting, waited

    waiting, waited = asyncio.run(scenario())
    assert isinstance(waiting.outcome, NoEngine)
    assert waited >= timeout


def test_a_queued_job_no_engine_can_come_for_is_answered_at_once(tmp_path: Path) -> None:
    """An engine that failed to join is not waited for: its host takes it out of the
    joinable set and asks the dispatcher to answer what only it could serve."""
    joinable = {"e"}

    async def scenario() -> FrontJob:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN, Unhosted(joinable))
        await dispatcher.start()
        try:
            waiting = job(1)
            dispatcher.submit(waiting)  # queued: an engine is on its way
            assert waiting.outcome is None and len(dispatcher.queue) == 1
            joinable.clear()
            dispatcher.answer_unservable()
            return waiting
        finally:
            await dispatcher.stop()

    waiting = asyncio.run(scenario())
    assert isinstance(waiting.outcome, NoEngine)


def test_a_silent_engine_is_missing_and_pinged_before_it_is_lost(tmp_path: Path) -> None:
    interval, liveness = 0.1, 20

    async def scenario() -> tuple[bool, bool, bool]:
        async with bus(tmp_path, heartbeat_interval=interval, heartbeat_liveness=liveness) as (
            dispatcher,
            endpoint,
        ):
            peer = Peer(endpoint, "e", slots=1)
            await peer.join()  # and then says nothing
            ping = await peer.recv()  # sent after two silent intervals, long before lost
            (record,) = dispatcher.registry.all()
            missing = record.missing
            await peer.send(Heartbeat("ready"))  # the answer to a PING
            await until(lambda: not record.missing, 5)
            still_there = dispatcher.registry.all() == [record]
            peer.close()
            return isinstance(ping, Ping), missing, still_there

    assert asyncio.run(scenario()) == (True, True, True)


async def told_before_a_sentinel(dispatcher: Dispatcher, peer: Peer) -> list[Message]:
    """What the front sent the peer before a CONTROL sent now (one socket keeps order):
    all it was told, without waiting a time for what must not come."""
    dispatcher.control(dispatcher.registry.all()[0], ControlAction.CONFIG, {})
    told = []
    while not isinstance(msg := await peer.recv(), Control):
        told.append(msg)
    return told


def test_a_lagging_streams_engine_is_told_to_hold_it_once_and_to_resume_it_once(
    tmp_path: Path,
) -> None:
    """Output past stream_backlog_chars for a stream whose client has not taken it: its
    engine gets one HOLD (not one per chunk); the client catching up gets one RESUME. A
    whole response (no writer) takes everything as it comes and is never held."""

    async def scenario() -> tuple[list[Message], FrontJob, FrontJob, int]:
        async with bus(tmp_path, stream_backlog_chars=1024) as (dispatcher, endpoint):
            peer = Peer(endpoint, "e", slots=2)
            await peer.join()
            streamed, whole = job(1), job(2)
            streamed.writer = asyncio.current_task()  # a stream's handler writes it
            dispatcher.submit(streamed)
            dispatcher.submit(whole)
            assert sorted(await peer.job_ids(2)) == [1, 2]
            bound = "x" * 1024
            await peer.send(Chunks([1, bound, 2, bound]))  # at the bound: not past it
            await until(lambda: whole.pending == 1024, 5)
            assert await told_before_a_sentinel(dispatcher, peer) == []
            await peer.send(Chunks([1, "more", 2, "more"]))  # past it
            await peer.send(Chunks([1, "still more", 2, "still more"]))
            await until(lambda: whole.pending == 1024 + 4 + 10, 5)  # both were read
            dispatcher.hold(streamed)  # a head saying so too: it is held already
            told = await told_before_a_sentinel(dispatcher, peer)
            dispatcher.resume(streamed)
            dispatcher.resume(streamed)  # a second call finds nothing held
            told += await told_before_a_sentinel(dispatcher, peer)
            holds = dispatcher.holds
            peer.close()
            return told, streamed, whole, holds

    told, streamed, whole, holds = asyncio.run(scenario())
    assert told == [Hold(1), Resume(1)]
    assert holds == 1 and not streamed.held and not whole.held


def test_a_job_that_ended_or_never_ran_is_neither_held_nor_resumed(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[Message], FrontJob, FrontJob]:
        async with bus(tmp_path) as (dispatcher, endpoint):
            peer = Peer(endpoint, "e", slots=1)
            await peer.join()
            running, queued = job(1), job(2)
            dispatcher.submit(running)
            dispatcher.submit(queued)  # no slot for it: it waits in the front's queue
            assert await peer.job_ids(1) == [1]
            dispatcher.hold(queued)  # on no engine: nothing to tell
            await peer.send(Done(1, "stop", 1, 1))
            assert await peer.job_ids(1) == [2]  # the freed slot takes the queued job
            dispatcher.hold(running)  # ended: not held
            dispatcher.hold(queued)  # now on the engine: held
            queued.finish(Done(2, "stop", 1, 1))  # ended before its client caught up
            dispatcher.resume(queued)  # no RESUME for an ended job
            told = await told_before_a_sentinel(dispatcher, peer)
            peer.close()
            return told, running, queued

    told, running, queued = asyncio.run(scenario())
    assert told == [Hold(2)]
    assert not running.held and not queued.held
