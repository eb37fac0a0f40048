"""The node's answers to the broker's chats (BrokerAnswers), over real jobs driven by hand
and a `send` that records what the broker would be sent. The dispatcher is real and never
started: with an engine that may still join (Unhosted), its jobs wait in its queue, and
the test plays the engine (push text, finish)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import zmq

from coderai.bus.kinds import FinishReason
from coderai.bus.messages import Done, Job
from coderai.catalogue.entries import Catalogue, ModelEntry
from coderai.config import ServerConfig
from coderai.errors import CoderaiError, EngineFailed
from coderai.front.aisbf import chat, wire
from coderai.front.aisbf.chat import BrokerAnswers
from coderai.front.api.openai.choices import ChoiceStream
from coderai.front.api.openai.reply import DONE_EVENT, data_event
from coderai.front.api.serving import Serving
from coderai.front.auth.activity import CURRENT, Activity
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.probe import probe
from coderai.front.engines.host import Unhosted
from coderai.front.engines.plan import EnginePlan
from coderai.front.live_feed import LiveFeed
from coderai.front.metrics import Metrics
from tests.support.bus import TOKEN, until

RID = "chat-1"
ENTRIES = [
    ModelEntry(id="m", format="fake", alias="Model M", options={"context_length": 4096}),
    ModelEntry(id="plain", format="fake"),
]
PLANS = [EnginePlan("e", "cpu", ("fake",), 2)]


#: the dispatchers' ZeroMQ contexts, ended after each test
_CONTEXTS: list[zmq.Context[zmq.Socket[bytes]]] = []


@pytest.fixture(autouse=True)
def no_current_ticket() -> Iterator[None]:
    """BrokerAnswers.chat sets the task's ticket: keep it from reaching the next test."""
    token = CURRENT.set(None)
    yield
    CURRENT.reset(token)
    while _CONTEXTS:
        _CONTEXTS.pop().term()


class Broker:
    """What the node sends the broker, in order."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def chunks(self) -> list[str]:
        return [m["payload"]["chunk"] for m in self.sent if m.get("event") == "chunk"]


async def answers_for(joinable: set[str]) -> BrokerAnswers:
    directory = ModelDirectory(Catalogue(ENTRIES), await probe(ENTRIES), PLANS)
    dispatcher = Dispatcher(ServerConfig(), "inproc://broker-chat", TOKEN, Unhosted(joinable))
    _CONTEXTS.append(dispatcher.context)
    return BrokerAnswers(Serving(dispatcher, directory, Metrics()), Activity(LiveFeed()))


def done(completion: int = 2) -> Done:
    return Done(1, FinishReason.STOP, 3, completion)


def jobs(count: int) -> list[FrontJob]:
    """`count` choices of one request, sharing one wake as Serving.submit_choices makes them."""
    wake = asyncio.Event()
    entry = ENTRIES[0]
    return [FrontJob(i, entry, "fake", Job(i, entry.spec("fake"), "chat", messages=[]), wake=wake)
            for i in range(1, count + 1)]  # fmt: skip


def choice_stream(count: int = 1) -> ChoiceStream:
    return ChoiceStream(True, "chatcmpl-1", 1700000000, "m", False, count)


def failure_frames(error: CoderaiError, stream: bool) -> list[dict[str, Any]]:
    return wire.ending(wire.failure(RID, error), stream)


# ---- a stream (_stream) ----------------------------------------------------------------


def test_a_stream_sends_each_event_as_a_chunk_then_done_after_the_done_event() -> None:
    stream = choice_stream()
    (job,) = jobs(1)
    job.push("e", "Hello")
    job.finish(done())
    broker = Broker()

    async def scenario() -> tuple[int, bool]:
        answers = await answers_for({"e"})
        return await answers._stream(RID, [job], stream, broker.send)

    assert asyncio.run(scenario()) == (200, False)
    expected = [choice_stream().opening(), choice_stream().items(0, ["Hello"]),
                choice_stream().finish(0, done()), DONE_EVENT]  # fmt: skip
    assert broker.chunks() == [event.decode() for event in expected]
    assert all(m["request_id"] == RID for m in broker.sent)
    assert broker.sent[-1] == wire.done(RID)
    assert broker.sent[-2] == wire.chunk(RID, "data: [DONE]\n\n")


def test_a_failure_before_the_first_event_is_sent_alone_with_its_own_status() -> None:
    (job,) = jobs(1)
    error = EngineFailed("engine e died")
    job.finish(error)
    broker = Broker()

    async def scenario() -> tuple[int, bool]:
        answers = await answers_for({"e"})
        return await answers._stream(RID, [job], choice_stream(), broker.send)

    assert asyncio.run(scenario()) == (503, True)
    # no role opening, no [DONE]: the error event, then done (the broker ends streams on it)
    assert broker.sent == failure_frames(error, True)
    assert broker.chunks() == [data_event(error.envelope()).decode()]


def test_a_failure_after_the_first_events_follows_them_and_the_status_stays_200() -> None:
    (job,) = jobs(1)
    error = EngineFailed("engine e died")
    job.push("e", "Hel")
    broker = Broker()

    async def send(message: dict[str, Any]) -> None:
        await broker.send(message)
        if job.outcome is None:  # once the broker has had the first event: more, then death
            job.push("e", "lo")
            job.finish(error)

    async def scenario() -> tuple[int, bool]:
        answers = await answers_for({"e"})
        return await answers._stream(RID, [job], choice_stream(), send)

    assert asyncio.run(scenario()) == (200, True)
    stream = choice_stream()
    # what came before the failure is sent, then the failure
    assert broker.chunks() == [
        stream.opening().decode(),
        stream.items(0, ["Hel"]).decode(),
        stream.items(0, ["lo"]).decode(),
        data_event(error.envelope()).decode(),
    ]
    assert broker.sent[-1] == wire.done(RID)
    assert "data: [DONE]\n\n" not in broker.chunks()


def test_events_wait_until_a_job_has_started_then_leave_in_order() -> None:
    (job,) = jobs(1)
    broker = Broker()

    async def scenario() -> tuple[int, bool]:
        answers = await answers_for({"e"})
        task = asyncio.create_task(answers._stream(RID, [job], choice_stream(), broker.send))
        job.dispatched = True  # sent to its engine: its handler is woken, as _dispatch does
        job.wake.set()
        for _ in range(5):  # turns enough for it to send what it must not yet
            await asyncio.sleep(0)
        assert broker.sent == []  # the role opening waits for the first output
        assert job.writer is task  # a lagging broker holds this choice: its writer is known
        job.push("e", "Hi")
        await until(lambda: len(broker.chunks()) >= 2, 5)
        assert broker.chunks() == [choice_stream().opening().decode(),
                                   choice_stream().items(0, ["Hi"]).decode()]  # fmt: skip
        job.finish(done())
        return await task

    assert asyncio.run(scenario()) == (200, False)
    assert broker.sent[-1] == wire.done(RID)


def test_a_stream_of_several_choices_ends_only_when_every_choice_has() -> None:
    first, second = jobs(2)
    first.push("e", "A")
    first.finish(done())
    second.push("e", "B")
    broker = Broker()
    stream = choice_stream(2)

    async def scenario() -> tuple[int, bool]:
        answers = await answers_for({"e"})
        task = asyncio.create_task(answers._stream(RID, [first, second], stream, broker.send))
        finished = choice_stream(2).finish(0, done()).decode()
        await until(lambda: finished in broker.chunks(), 5)
        assert "data: [DONE]\n\n" not in broker.chunks()
        assert wire.done(RID) not in broker.sent
        second.finish(done(5))
        return await task

    assert asyncio.run(scenario()) == (200, False)
    last = choice_stream(2).finish(1, done(5)).decode()
    assert broker.chunks()[-2:] == [last, "data: [DONE]\n\n"]
    assert broker.sent[-1] == wire.done(RID)


def test_a_held_choice_is_resumed_once_its_output_is_taken() -> None:
    (job,) = jobs(1)
    job.push("e", "Hello")
    job.held = True  # its engine was told to hold it: the broker lagged
    job.finish(done())
    broker = Broker()

    async def scenario() -> tuple[int, bool]:
        answers = await answers_for({"e"})
        return await answers._stream(RID, [job], choice_stream(), broker.send)

    assert asyncio.run(scenario()) == (200, False)
    assert job.held is False


# ---- a whole answer (_whole) -----------------------------------------------------------


def test_a_whole_answer_is_one_ok_reply_with_every_choices_text() -> None:
    first, second = jobs(2)
    for job, text in ((first, ["Hel", "lo"]), (second, ["Bye"])):
        for part in text:
            job.push("e", part)
        job.finish(done())
    broker = Broker()
    head = ("chatcmpl-1", 1700000000, "m")

    async def scenario() -> tuple[int, bool]:
        answers = await answers_for({"e"})
        return await answers._whole(RID, [first, second], head, False, broker.send)

    assert asyncio.run(scenario()) == (200, False)
    ((reply),) = broker.sent
    assert (reply["request_id"], reply["status"]) == (RID, "ok")
    body = reply["payload"]
    assert [c["message"]["content"] for c in body["choices"]] == ["Hello", "Bye"]
    assert [c["finish_reason"] for c in body["choices"]] == ["stop", "stop"]
    assert body["usage"]["completion_tokens"] == 4
    assert body["usage"]["prompt_tokens"] == 3  # one prompt, read once for both choices


def test_a_whole_answer_with_a_failed_choice_is_that_error_alone_and_its_status() -> None:
    first, second = jobs(2)
    first.push("e", "fine")
    first.finish(done())
    error = EngineFailed("engine e died")
    second.finish(error)
    broker = Broker()

    async def scenario() -> tuple[int, bool]:
        answers = await answers_for({"e"})
        return await answers._whole(RID, [first, second], ("c", 1, "m"), False, broker.send)

    assert asyncio.run(scenario()) == (503, True)
    assert broker.sent == failure_frames(error, False)
    assert broker.sent[0]["status"] == "error"
    assert "event" in broker.sent[0] and broker.sent[0]["event"] == "error"


def test_while_a_whole_answer_is_made_the_broker_hears_it_is_pending(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no time between keep-alives, the first wait for output ends in one at once
    (no clock is waited on)."""
    monkeypatch.setattr(chat, "PENDING_EVERY", 0.0)
    (job,) = jobs(1)
    broker = Broker()

    async def send(message: dict[str, Any]) -> None:
        await broker.send(message)
        if message["status"] == "pending":
            job.push("e", "late")
            job.finish(done())

    async def scenario() -> tuple[int, bool]:
        answers = await answers_for({"e"})
        async with asyncio.timeout(10):  # only a guard: without the keep-alive, no end
            return await answers._whole(RID, [job], ("c", 1, "m"), False, send)

    assert asyncio.run(scenario()) == (200, False)
    assert broker.sent[0] == wire.pending(RID, 0.0)
    assert [m["status"] for m in broker.sent] == ["pending", "ok"]
    assert broker.sent[1]["payload"]["choices"][0]["message"]["content"] == "late"


# ---- a chat, through the real Serving ----------------------------------------------------


def chat_payload(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def test_a_refused_streamed_chat_ends_as_a_stream_and_is_recorded_with_its_status() -> None:
    broker = Broker()

    async def scenario() -> tuple[bool, Activity]:
        answers = await answers_for({"e"})
        failed = await answers.chat(RID, {"model": "m", "messages": [], "stream": True},
                                    broker.send)  # fmt: skip
        return failed, answers.activity

    failed, activity = asyncio.run(scenario())
    assert failed is True
    assert [m.get("event") for m in broker.sent] == ["chunk", "done"]
    assert '"invalid_request_error"' in broker.chunks()[0]
    (ticket,) = activity.recent
    assert (ticket.status, ticket.caller) == (400, "broker")
    assert ticket.route == "broker:chat.completions"


def test_a_refused_whole_chat_is_one_error_reply() -> None:
    broker = Broker()

    async def scenario() -> bool:
        answers = await answers_for({"e"})
        return await answers.chat(RID, {"model": "m", "messages": []}, broker.send)

    assert asyncio.run(scenario()) is True
    ((reply),) = broker.sent
    assert (reply["status"], reply["event"]) == ("error", "error")
    assert reply["details"]["error"]["type"] == "invalid_request_error"


def test_a_chat_with_no_engine_to_run_it_is_answered_503() -> None:
    broker = Broker()

    async def scenario() -> Activity:
        answers = await answers_for(set())  # none running, none to come
        assert await answers.chat(RID, chat_payload(), broker.send) is True
        return answers.activity

    activity = asyncio.run(scenario())
    assert broker.sent[0]["code"] == "no_engine"
    assert activity.recent[0].status == 503


def test_a_streamed_chat_runs_its_jobs_to_done_and_the_nulls_it_was_sent_are_dropped() -> None:
    broker = Broker()

    async def scenario() -> tuple[bool, Activity, FrontJob]:
        answers = await answers_for({"e"})
        payload = chat_payload(stream=True, temperature=None, n=None)  # the broker's nulls
        task = asyncio.create_task(answers.chat(RID, payload, broker.send))
        queue = answers.serving.dispatcher.queue
        await until(lambda: queue, 5)
        (job,) = list(queue)  # waiting for the engine that may join
        job.push("e", "Hi")
        job.finish(done())
        return await task, answers.activity, job

    failed, activity, job = asyncio.run(scenario())
    assert failed is False
    assert job.outcome is not None and not job.abandoned
    assert broker.chunks()[-1] == "data: [DONE]\n\n"
    assert broker.sent[-1] == wire.done(RID)
    (ticket,) = activity.recent
    assert (ticket.status, ticket.stream, ticket.outcome) == (200, True, "completed")


def test_a_broker_that_goes_away_cancels_the_chats_jobs_and_the_request_is_cancelled() -> None:
    broker = Broker()

    async def scenario() -> tuple[Activity, FrontJob, int]:
        answers = await answers_for({"e"})
        task = asyncio.create_task(answers.chat(RID, chat_payload(stream=True), broker.send))
        queue = answers.serving.dispatcher.queue
        await until(lambda: queue, 5)
        (job,) = list(queue)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return answers.activity, job, len(queue)

    activity, job, queued = asyncio.run(scenario())
    assert job.abandoned and queued == 0
    assert activity.recent[0].outcome == "cancelled"
    assert broker.sent == []


# ---- the catalogue -----------------------------------------------------------------------


def test_the_models_listing_names_each_model_and_its_context_where_known() -> None:
    async def scenario() -> dict[str, Any]:
        return (await answers_for(set())).models()

    assert asyncio.run(scenario()) == {
        "object": "list",
        "data": [
            {"id": "m", "name": "Model M", "context_length": 4096},
            {"id": "plain", "name": "plain"},
        ],
    }
