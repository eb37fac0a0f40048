"""The job service every route uses (Serving), over a real dispatcher that is never started:
with an engine that may still join (Unhosted), its jobs wait in the queue and the test
plays the engine. No dispatcher subprocess, no bus."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from coderai.bus.kinds import FinishReason, JobKind
from coderai.bus.messages import Done
from coderai.catalogue.entries import Catalogue, ModelEntry
from coderai.config import ServerConfig
from coderai.errors import ModelFileError, ModelNotAllowed, ModelNotFound, QueueFull
from coderai.front.api.serving import Serving
from coderai.front.auth.activity import CURRENT, Ticket
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.jobs import FrontJob, Outcome
from coderai.front.dispatch.probe import probe
from coderai.front.engines.host import Unhosted
from coderai.front.engines.plan import EnginePlan
from coderai.front.metrics import Metrics
from coderai.state import api_keys
from tests.support.bus import TOKEN, until

PLANS = [EnginePlan("e", "cpu", ("fake", "gguf"), 2)]
FIELDS = {"max_tokens": 8, "seed": None}

#: the dispatchers' ZeroMQ contexts, ended after each test
_CONTEXTS: list[zmq.Context[zmq.Socket[bytes]]] = []


@pytest.fixture(autouse=True)
def fresh_state() -> Iterator[None]:
    token = CURRENT.set(None)
    yield
    CURRENT.reset(token)
    while _CONTEXTS:
        _CONTEXTS.pop().term()


async def serving_for(entries: list[ModelEntry], max_queue: int = 1024) -> Serving:
    directory = ModelDirectory(Catalogue(entries), await probe(entries), PLANS)
    settings = ServerConfig(max_queue=max_queue)
    dispatcher = Dispatcher(settings, "inproc://serving", TOKEN, Unhosted({"e"}))
    _CONTEXTS.append(dispatcher.context)
    return Serving(dispatcher, directory, Metrics())


def fake(model: str = "m") -> ModelEntry:
    return ModelEntry(id=model, format="fake")


def request_with_key(models: tuple[str, ...] | None) -> Ticket:
    key, _ = api_keys.create("ci", models)
    ticket = Ticket(1, "/v1/chat/completions", key)
    CURRENT.set(ticket)
    return ticket


# ---- resolve -----------------------------------------------------------------------------


def test_a_model_the_key_may_not_use_is_refused_before_its_file_is_checked(
    tmp_path: Path,
) -> None:
    gone = ModelEntry(id="gone", path=str(tmp_path / "absent.gguf"))

    async def scenario() -> None:
        serving = await serving_for([gone, fake("other")])
        with pytest.raises(ModelFileError):  # any key: the file's problem is the answer
            await serving.resolve("gone")
        request_with_key(("other",))
        with pytest.raises(ModelNotAllowed):  # this key: the model is not its to know of
            await serving.resolve("gone")
        assert (await serving.resolve("other")).id == "other"

    asyncio.run(scenario())


def test_an_unknown_model_is_not_found_whatever_the_key() -> None:
    async def scenario() -> None:
        serving = await serving_for([fake()])
        request_with_key(None)
        with pytest.raises(ModelNotFound):
            await serving.resolve("nope")

    asyncio.run(scenario())


# ---- submit and submit_choices -----------------------------------------------------------


def test_a_submitted_job_is_counted_in_its_requests_ticket() -> None:
    async def scenario() -> tuple[Ticket, FrontJob]:
        serving = await serving_for([fake()])
        ticket = request_with_key(None)
        job = serving.submit(serving.directory.entry("m"), JobKind.COMPLETION, prompt="hi")
        assert list(serving.dispatcher.queue) == [job]
        return ticket, job

    ticket, job = asyncio.run(scenario())
    assert ticket.jobs == [job]
    assert ticket.model == "m"
    assert job.message.kind == JobKind.COMPLETION and job.structured is False


def test_n_choices_of_each_prompt_share_one_wake_in_prompt_order() -> None:
    async def scenario() -> list[FrontJob]:
        serving = await serving_for([fake()])
        payloads = [{"prompt": "first"}, {"prompt": "second"}]
        entry = serving.directory.entry("m")
        return serving.submit_choices(entry, JobKind.COMPLETION, 2, FIELDS, payloads)

    jobs = asyncio.run(scenario())
    assert [j.message.prompt for j in jobs] == ["first", "first", "second", "second"]
    assert len({id(j.wake) for j in jobs}) == 1  # one handler wakes for any of them
    assert all(j.structured for j in jobs)
    assert len({j.id for j in jobs}) == 4


def test_a_seeded_request_seeds_choice_i_with_seed_plus_i_wrapping_at_2_63() -> None:
    async def scenario() -> list[list[int | None]]:
        serving = await serving_for([fake()])
        entry = serving.directory.entry("m")
        seeds = []
        for seed in (None, 7, 2**63 - 2):
            jobs = serving.submit_choices(entry, JobKind.COMPLETION, 3, {**FIELDS, "seed": seed},
                                          [{"prompt": "p"}, {"prompt": "q"}])  # fmt: skip
            seeds.append([j.message.seed for j in jobs])
        return seeds

    unseeded, seeded, wrapping = asyncio.run(scenario())
    assert unseeded == [None] * 6
    assert seeded == [7, 8, 9, 7, 8, 9]  # each prompt's choices repeat with the request
    assert wrapping == [2**63 - 2, 2**63 - 1, 0] * 2


def test_choices_refused_part_way_take_the_ones_already_queued_with_them() -> None:
    async def scenario() -> tuple[list[FrontJob], int]:
        serving = await serving_for([fake()], max_queue=2)
        entry = serving.directory.entry("m")
        with pytest.raises(QueueFull):
            serving.submit_choices(entry, JobKind.COMPLETION, 3, FIELDS, [{"prompt": "p"}])
        queued = list(serving.dispatcher.queue)
        return queued, len(serving.dispatcher.queue)

    queued, left = asyncio.run(scenario())
    assert queued == [] and left == 0


# ---- answer ------------------------------------------------------------------------------


async def answering(serving: Serving) -> tuple[asyncio.Task[tuple[FrontJob, Outcome]], FrontJob]:
    """A tokenize answer under way: its task, and its job once queued."""
    task: asyncio.Task[tuple[FrontJob, Outcome]] = asyncio.create_task(
        serving.answer(serving.directory.entry("m"), JobKind.TOKENIZE, prompt="hi")
    )
    await until(lambda: serving.dispatcher.queue, 5)
    (job,) = list(serving.dispatcher.queue)
    return task, job


def test_an_answer_waits_for_the_jobs_end_whatever_comes_before() -> None:
    async def scenario() -> tuple[FrontJob, object]:
        serving = await serving_for([fake()])
        task, job = await answering(serving)
        job.push("e", "output that is not the end")
        for _ in range(5):  # turns enough for it to see that output (and wrongly end)
            await asyncio.sleep(0)
        assert not task.done()
        job.finish(Done(job.id, FinishReason.STOP, 2, 0))
        return await task

    job, outcome = asyncio.run(scenario())
    assert outcome is job.outcome and isinstance(outcome, Done)
    assert not job.abandoned  # it ended: nothing to cancel


def test_an_answer_whose_client_went_away_cancels_its_job() -> None:
    async def scenario() -> tuple[FrontJob, int]:
        serving = await serving_for([fake()])
        task, job = await answering(serving)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return job, len(serving.dispatcher.queue)

    job, left = asyncio.run(scenario())
    assert job.abandoned and left == 0
