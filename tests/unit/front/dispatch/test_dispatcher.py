"""The dispatcher on a real ROUTER socket, with test peers as engines."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from coderai.bus.messages import Cancel, Chunks, Done, Heartbeat, Job, Tokens
from coderai.catalogue.entries import ModelEntry
from coderai.config import ServerConfig
from coderai.errors import EngineFailed, InvalidRequest, ShuttingDown
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.output import CallPiece, Piece
from tests.support.bus import TOKEN, Peer, bus, until
from tests.support.bus import job as make_job


async def _joined_engine(endpoint: str) -> Peer:
    peer = Peer(endpoint, "e", slots=2)
    await peer.join()
    return peer


def test_a_send_to_an_engine_that_vanished_loses_it_and_fails_its_job(tmp_path: Path) -> None:
    async def scenario() -> None:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN)
        await dispatcher.start()
        try:
            peer = await _joined_engine(endpoint)
            entry = ModelEntry(id="m", format="fake")
            job = FrontJob(1, entry, "fake", Job(1, entry.spec("fake"), "completion", "hi"))
            dispatcher.submit(job)
            assert await peer.job_ids(1) == [1]
            job.push("e", "first token")  # it started, so it cannot move elsewhere
            peer.close()  # the engine is gone without a word
            # each CANCEL is sent until libzmq has seen the peer go; then one fails
            async with asyncio.timeout(5):
                while dispatcher.registry.all():
                    dispatcher.cancel(job)
                    await asyncio.sleep(0.01)
            assert isinstance(job.outcome, EngineFailed)
        finally:
            await dispatcher.stop()

    asyncio.run(scenario())


def test_stop_ends_every_job_running_or_queued(tmp_path: Path) -> None:
    """Jobs on an engine at shutdown are ended, not put back in a queue nobody reads."""

    async def scenario() -> list[FrontJob]:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN)
        await dispatcher.start()
        peer = await _joined_engine(endpoint)  # 2 slots
        jobs = [make_job(i) for i in (1, 2, 3)]
        for job in jobs:
            dispatcher.submit(job)
        assert sorted(await peer.job_ids(2)) == [1, 2]  # two dispatched, one queued
        assert len(dispatcher.queue) == 1
        await dispatcher.stop()
        peer.close()
        return jobs

    jobs = asyncio.run(scenario())
    assert all(isinstance(job.outcome, ShuttingDown) for job in jobs)


def test_a_job_that_cannot_be_encoded_is_refused_before_it_takes_credit(tmp_path: Path) -> None:
    """The HTTP schemas refuse such values first; the dispatcher does not rely on it."""

    async def scenario() -> tuple[Dispatcher, InvalidRequest | None]:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN)
        await dispatcher.start()
        peer = await _joined_engine(endpoint)
        entry = ModelEntry(id="m", format="fake")
        bad = Job(1, entry.spec("fake"), "completion", "hi", seed=2**64)
        refused = None
        try:
            dispatcher.submit(FrontJob(1, entry, "fake", bad))
        except InvalidRequest as exc:
            refused = exc
        record = dispatcher.registry.all()[0]
        assert (record.free, len(dispatcher.queue)) == (record.slots, 0)
        await dispatcher.stop()
        peer.close()
        return dispatcher, refused

    _, refused = asyncio.run(scenario())
    assert refused is not None


def test_a_tokens_answer_is_kept_for_its_job_and_one_with_ids_not_integers_is_dropped(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[Dispatcher, FrontJob]:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN)
        await dispatcher.start()
        peer = await _joined_engine(endpoint)
        entry = ModelEntry(id="m", format="fake")
        job = FrontJob(1, entry, "fake", Job(1, entry.spec("fake"), "tokenize", "hi"))
        dispatcher.submit(job)
        assert await peer.job_ids(1) == [1]
        await peer.send(Tokens(1, ids=["104"]))  # type: ignore[list-item]
        await peer.send(Tokens(1, ids=[104, 105], context=8))
        await peer.send(Done(1, "stop", 2, 0))
        async with asyncio.timeout(5):
            while job.outcome is None:
                await job.wait()
        await dispatcher.stop()
        peer.close()
        return dispatcher, job

    dispatcher, job = asyncio.run(scenario())
    assert dispatcher.dropped_frames == 1
    assert job.tokens == Tokens(1, ids=[104, 105], context=8)


def test_an_unreadable_delta_ends_its_own_job_and_the_others_keep_their_text(
    tmp_path: Path,
) -> None:
    """Found by test_bus_stateful: the deltas before a bad one used to be applied (the job
    started, its text kept) and those after it lost, although the message was counted as
    dropped. Now the job whose delta cannot be read ends with an error and takes none of
    the message's text; the other jobs in it keep theirs."""

    async def scenario() -> tuple[Dispatcher, list[FrontJob], list[str]]:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN)
        await dispatcher.start()
        peer = await _joined_engine(endpoint)  # 2 slots
        jobs = [make_job(i) for i in (1, 2)]
        for job in jobs:
            dispatcher.submit(job)
        assert sorted(await peer.job_ids(2)) == [1, 2]
        await peer.send(Chunks([1, "kept?", 2, "two", 1, 7, 2, " more"]))
        assert isinstance(await peer.recv(), Cancel)  # its engine is told to stop job 1
        texts = [job.take() for job in jobs]
        await dispatcher.stop()
        peer.close()
        return dispatcher, jobs, texts

    dispatcher, jobs, texts = asyncio.run(scenario())
    assert dispatcher.dropped_frames == 1
    assert texts == ["", "two more"]
    assert isinstance(jobs[0].outcome, EngineFailed)
    assert "could not be read" in jobs[0].outcome.message


def test_a_structured_jobs_unreadable_pieces_end_it_alone(tmp_path: Path) -> None:
    """Pieces (calls, logprobs) are read before anything is applied too: a malformed call
    ends that job; a plain job's text and a good call in the same message are kept."""

    async def scenario() -> tuple[Dispatcher, list[object], list[list[object]]]:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN)
        await dispatcher.start()
        peer = Peer(endpoint, "e", slots=3)
        await peer.join()
        jobs = [make_job(i) for i in (1, 2, 3)]
        jobs[0].structured = jobs[1].structured = True
        for job in jobs:
            dispatcher.submit(job)
        assert sorted(await peer.job_ids(3)) == [1, 2, 3]
        good = {"calls": [[0, "f", "{}"]]}
        bad = {"calls": [[0, "f"]]}  # not [index, name, arguments]
        await peer.send(Chunks([1, good, 2, "a", 3, "plain", 2, bad]))
        assert isinstance(await peer.recv(), Cancel)
        items: list[list[object]] = [list(job.take_items()) for job in jobs]
        outcomes: list[object] = [job.outcome for job in jobs]
        await dispatcher.stop()
        peer.close()
        return dispatcher, outcomes, items

    dispatcher, outcomes, items = asyncio.run(scenario())
    assert dispatcher.dropped_frames == 1
    assert items == [[Piece("", [CallPiece(0, "f", "{}")])], [], ["plain"]]
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], EngineFailed)


def test_a_chat_jobs_reasoning_is_taken_though_it_asked_for_no_pieces(tmp_path: Path) -> None:
    """A chat job's model may reason: its thinking arrives as a piece even on the plain
    path (the front cannot know beforehand), and is kept in order with its text; a
    completion job that is sent a piece is a protocol error, as before."""

    async def scenario() -> tuple[Dispatcher, list[object], list[list[object]]]:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN)
        await dispatcher.start()
        peer = await _joined_engine(endpoint)  # 2 slots
        chat, completion = make_job(1), make_job(2)
        chat.message = dataclasses.replace(chat.message, kind="chat")
        for job in (chat, completion):
            dispatcher.submit(job)
        assert sorted(await peer.job_ids(2)) == [1, 2]
        await peer.send(Chunks([1, {"reasoning": "hm"}, 1, "Yes.", 2, {"reasoning": "x"}]))
        assert isinstance(await peer.recv(), Cancel)  # job 2's engine is told to stop it
        items: list[list[object]] = [list(job.take_items()) for job in (chat, completion)]
        outcomes: list[object] = [chat.pieces, chat.outcome, completion.outcome]
        await dispatcher.stop()
        peer.close()
        return dispatcher, outcomes, items

    dispatcher, (pieces, chat_outcome, completion_outcome), items = asyncio.run(scenario())
    assert items == [[Piece(reasoning="hm"), "Yes."], []]
    assert pieces and chat_outcome is None
    assert dispatcher.dropped_frames == 1 and isinstance(completion_outcome, EngineFailed)


def test_a_heartbeats_room_figures_are_checked_and_kept_with_their_arrival_time(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[Dispatcher, list[tuple[float, float | None, float]]]:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN)
        await dispatcher.start()
        peer = await _joined_engine(endpoint)
        record = dispatcher.registry.all()[0]
        seen = []
        for beat in (
            Heartbeat("ready", wants_mb=-1.0),
            Heartbeat("ready", wants_mb="lots"),  # type: ignore[arg-type]
            Heartbeat("ready", room_mb="x"),  # type: ignore[arg-type]
            Heartbeat("ready", room_mb=True),
            Heartbeat("ready", room_mb=float("inf")),
            Heartbeat("ready", coming_mb=float("nan")),
            Heartbeat("ready", measures=-1),
            Heartbeat("ready", loaded=[1]),  # type: ignore[list-item]
            Heartbeat("ready", wants_mb=300.0, room_mb=-20.5, coming_mb=5.0, measures=3),
            Heartbeat("ready"),
        ):
            accepted = record.residents_at  # set by each heartbeat that is kept
            dropped = dispatcher.dropped_frames
            await peer.send(beat)
            async with asyncio.timeout(5):
                while record.residents_at == accepted and dispatcher.dropped_frames == dropped:
                    await asyncio.sleep(0.005)
            seen.append((record.wants_mb, record.room_mb, record.residents_at))
        await dispatcher.stop()
        peer.close()
        return dispatcher, seen

    dispatcher, seen = asyncio.run(scenario())
    assert dispatcher.dropped_frames == 8
    (wants, room, at), (wants_after, room_after, at_after) = seen[8], seen[9]
    assert (wants, room) == (300.0, -20.5) and at > 0
    assert (wants_after, room_after) == (0.0, None) and at_after >= at


def test_what_replicas_say_they_hold_routes_a_conversation_once_it_is_known(
    tmp_path: Path,
) -> None:
    """Heartbeats' holds reach the router: a home's report that cuts its list keeps it
    home; one that counts the conversation's last JOB, names all and not it sends the
    conversation to the replica that names it."""

    async def scenario() -> list[str]:
        async with bus(tmp_path) as (dispatcher, endpoint):
            peers = {name: Peer(endpoint, name, slots=2) for name in ("a", "b")}
            for peer in peers.values():
                await peer.join()
            records = {r.name: r for r in dispatcher.registry.all()}
            entry = ModelEntry(id="m", format="fake")
            went: list[str] = []

            async def turn(job_id: int) -> None:
                message = Job(job_id, entry.spec("fake"), "completion", "hi", affinity="c1")
                dispatcher.submit(FrontJob(job_id, entry, "fake", message,
                                           replicas=("a", "b"), affinity="c1"))  # fmt: skip
                name = next(n for n, r in records.items() if job_id in r.jobs)
                went.append(name)
                assert await peers[name].job_ids(1) == [job_id]
                await peers[name].send(Done(job_id, "stop", 1, 1))
                await until(lambda: not records[name].jobs, 5)

            async def tell(name: str, held: list[str], cut: list[str], taken: int) -> None:
                beat = Heartbeat("ready", holds={"m": held}, holds_cut=cut, taken=taken)
                await peers[name].send(beat)
                await until(lambda: records[name].holds_cut == frozenset(cut)
                            and records[name].holds.get("m") == frozenset(held), 5)  # fmt: skip

            await turn(1)  # new: the first of two idle replicas
            await tell("b", ["c1"], [], 0)  # b holds it too (it ran it before, say)
            await tell("a", [], ["m"], 1)  # a names only some of what it holds: not known
            await turn(2)
            await tell("a", [], [], 2)  # a took JOB 2, names all it holds, not c1: let go
            await turn(3)
            for peer in peers.values():
                peer.close()
            return went

    assert asyncio.run(scenario()) == ["a", "a", "b"]
