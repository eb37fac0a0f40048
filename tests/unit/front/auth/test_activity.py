"""The Activity page's decisions over plain objects: a request's outcome, what its ticket
shows, which requests are listed and when the console is told (the routes are tested in
tests/integration/front/console/test_console_auth)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coderai.bus.kinds import FinishReason
from coderai.bus.messages import Done, Job
from coderai.catalogue.entries import ModelEntry
from coderai.errors import EngineFailed, ModelNotAllowed
from coderai.front.auth import activity
from coderai.front.auth.activity import CURRENT, RECENT, Activity, Ticket, _outcome
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.live_feed import LiveFeed
from coderai.state import api_keys


@pytest.fixture(autouse=True)
def no_current_ticket() -> Iterator[None]:
    """Activity.open sets the task's ticket: keep it from reaching the next test."""
    token = CURRENT.set(None)
    yield
    CURRENT.reset(token)


def job(
    job_id: int = 1,
    model: str = "m",
    outcome: Done | EngineFailed | None = None,
    served_by: str | None = None,
    first_at: float | None = None,
) -> FrontJob:
    entry = ModelEntry(id=model, format="fake")
    made = FrontJob(job_id, entry, "fake", Job(job_id, entry.spec("fake"), "completion", "p"))
    made.outcome = outcome
    made.served_by = served_by
    made.first_at = first_at
    return made


def done(prompt: int = 3, completion: int = 5, reason: str = FinishReason.STOP) -> Done:
    return Done(1, reason, prompt, completion)


def failed() -> EngineFailed:
    return EngineFailed("engine e died")


# ---- _outcome ------------------------------------------------------------------------


def test_a_request_whose_client_left_is_cancelled_whatever_its_status_or_jobs() -> None:
    assert _outcome(200, True, [job(outcome=done())]) == "cancelled"
    assert _outcome(500, True, [job(outcome=failed())]) == "cancelled"


def test_an_error_status_is_an_error_from_400_on() -> None:
    assert _outcome(400, False, []) == "error"
    assert _outcome(503, False, [job(outcome=done())]) == "error"
    assert _outcome(399, False, []) == "completed"


def test_a_stream_that_began_then_failed_is_an_error_despite_its_200() -> None:
    jobs = [job(1, outcome=done()), job(2, outcome=failed())]
    assert _outcome(200, False, jobs) == "error"


def test_a_job_still_running_is_no_error() -> None:
    assert _outcome(200, False, [job(outcome=None), job(2, outcome=done())]) == "completed"


def test_a_job_the_front_cancelled_makes_the_request_cancelled_unless_another_failed() -> None:
    cancelled = job(1, outcome=done(reason=FinishReason.CANCELLED))
    assert _outcome(200, False, [job(2, outcome=done()), cancelled]) == "cancelled"
    assert _outcome(200, False, [cancelled, job(2, outcome=failed())]) == "error"


def test_jobs_ended_for_any_other_reason_complete_the_request() -> None:
    jobs = [job(1, outcome=done(reason=FinishReason.LENGTH)), job(2, outcome=done())]
    assert _outcome(200, False, jobs) == "completed"
    assert _outcome(200, False, []) == "completed"


# ---- Ticket --------------------------------------------------------------------------


def test_tokens_count_only_the_jobs_that_ended_with_done() -> None:
    ticket = Ticket(1, "/v1/completions", None)
    ticket.jobs = [
        job(1, outcome=done(prompt=3, completion=5)),
        job(2, outcome=done(prompt=10, completion=20)),
        job(3, outcome=failed()),
        job(4, outcome=None),
    ]
    assert ticket.tokens() == (13, 25)
    assert Ticket(2, "/v1/completions", None).tokens() == (0, 0)


def test_a_ticket_is_named_by_its_key_else_by_its_caller() -> None:
    key, _ = api_keys.create("ci")
    assert Ticket(1, "/v1/models", key, caller="admin").key_name == "ci"
    assert Ticket(1, "/v1/models", None, caller="console:ann").key_name == "console:ann"
    assert Ticket(1, "/v1/models", None).key_name is None


def test_ending_a_ticket_records_its_status_and_outcome() -> None:
    ticket = Ticket(1, "/v1/chat/completions", None)
    ticket.jobs = [job(outcome=failed())]
    ticket.end(200, client_left=False)
    assert (ticket.status, ticket.outcome) == (200, "error")
    assert ticket.ended is not None
    left = Ticket(2, "/v1/chat/completions", None)
    left.end(200, client_left=True)
    assert (left.status, left.outcome) == (200, "cancelled")


def test_the_public_view_of_an_ended_ticket() -> None:
    key, _ = api_keys.create("ci")
    ticket = Ticket(7, "/v1/chat/completions", key, started_at=1_700_000_000.0, started=100.0)
    ticket.model = "m"
    ticket.stream = True
    ticket.jobs = [
        job(1, outcome=done(3, 5), served_by="b", first_at=100.5),
        job(2, outcome=done(4, 6), served_by="a", first_at=100.25),
        job(3, outcome=done(1, 1), served_by="b", first_at=None),
        job(4, outcome=None, served_by=None, first_at=None),
    ]
    ticket.end(200, client_left=False)
    ticket.ended = 101.5  # a fixed clock: the view's times are differences of these
    assert ticket.public() == {
        "id": 7,
        "route": "/v1/chat/completions",
        "model": "m",
        "engine": "a,b",  # each engine once, sorted; a job on none is not one
        "key": "ci",
        "stream": True,
        "started_at": 1_700_000_000.0,
        "ttft_ms": 250.0,  # the first output of any job
        "duration_ms": 1500.0,
        "prompt_tokens": 8,
        "completion_tokens": 12,
        "status": 200,
        "outcome": "completed",
    }


def test_a_ticket_without_output_shows_no_engine_and_no_first_token() -> None:
    ticket = Ticket(1, "/v1/embeddings", None, caller="admin")
    ticket.jobs = [job(outcome=None)]
    view = ticket.public()
    assert view["engine"] is None and view["ttft_ms"] is None
    assert (view["status"], view["outcome"], view["key"]) == (None, "running", "admin")
    assert view["duration_ms"] >= 0  # a running ticket's duration runs to now


# ---- Activity ------------------------------------------------------------------------


def opened(board: Activity, count: int, shown: bool = True) -> list[Ticket]:
    return [board.open("/v1/completions", None, "admin", shown) for _ in range(count)]


def test_shown_requests_are_numbered_from_one_and_listed_as_running() -> None:
    board = Activity(LiveFeed())
    first, second = opened(board, 2)
    assert (first.id, second.id) == (1, 2)
    assert board.running == {1: first, 2: second}
    assert CURRENT.get() is second  # the handler's jobs attach to the ticket just opened


def test_a_request_not_shown_is_never_listed_but_still_ends() -> None:
    board = Activity(LiveFeed())
    (hidden,) = opened(board, 1, shown=False)
    assert hidden.id == 0 and board.running == {}
    assert CURRENT.get() is hidden
    board.close(hidden, 404, client_left=False)
    assert hidden.outcome == "error"
    assert list(board.recent) == [] and board.snapshot() == {"running": [], "recent": []}
    (shown,) = opened(board, 1)
    assert shown.id == 1  # a hidden request takes no number


def test_closing_moves_a_request_to_the_front_of_the_recent_ones() -> None:
    board = Activity(LiveFeed())
    first, second, third = opened(board, 3)
    board.close(first, 200, client_left=False)
    board.close(third, 500, client_left=False)
    assert list(board.running) == [2]
    assert list(board.recent) == [third, first]
    snapshot = board.snapshot()
    assert [t["id"] for t in snapshot["running"]] == [2]
    assert [(t["id"], t["outcome"]) for t in snapshot["recent"]] == [(3, "error"), (1, "completed")]
    assert second.outcome == "running"


def test_closing_a_ticket_twice_lists_it_once() -> None:
    board = Activity(LiveFeed())
    (ticket,) = opened(board, 1)
    board.close(ticket, 200, client_left=False)
    board.close(ticket, 200, client_left=False)
    assert list(board.recent) == [ticket]


def test_the_snapshot_lists_running_requests_newest_first() -> None:
    board = Activity(LiveFeed())
    opened(board, 3)
    assert [t["id"] for t in board.snapshot()["running"]] == [3, 2, 1]


def test_only_the_most_recent_ended_requests_are_kept() -> None:
    board = Activity(LiveFeed())
    for ticket in opened(board, RECENT + 1):
        board.close(ticket, 200, client_left=False)
    ids = [t.id for t in board.recent]
    assert len(ids) == RECENT
    assert ids[0] == RECENT + 1 and ids[-1] == 2  # the oldest, 1, is dropped


# ---- what the console is told --------------------------------------------------------


def _events(frames: list[bytes]) -> list[tuple[str, Any]]:
    out = []
    for raw in frames:
        event, data = raw.decode().strip().split("\n")
        out.append((event.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def console_sees(feed: LiveFeed, act: Callable[[], None]) -> tuple[list[str], list[Any]]:
    """What one console watching the feed receives: the snapshots it is sent on connect
    (their names), and the `request` events `act` publishes."""

    async def watch() -> tuple[list[str], list[Any]]:
        subscriber = feed.subscribe()
        try:
            snapshots = _events(await anext(subscriber))
            act()
            feed.publish("end", {})  # the last of what `act` published
            seen: list[tuple[str, Any]] = []
            while not seen or seen[-1][0] != "end":
                seen += _events(await anext(subscriber))
        finally:
            await subscriber.aclose()
        assert {name for name, _ in seen} <= {"request", "end"}
        return [name for name, _ in snapshots], [data for name, data in seen[:-1]]

    return asyncio.run(watch())


def test_a_console_is_sent_the_activity_snapshot_when_it_connects() -> None:
    feed = LiveFeed()
    Activity(feed)
    snapshots, _ = console_sees(feed, lambda: None)
    assert snapshots == ["activity"]


def test_a_watching_console_hears_of_shown_requests_opening_and_ending() -> None:
    feed = LiveFeed()
    board = Activity(feed)

    def requests() -> None:
        (hidden,) = opened(board, 1, shown=False)
        (shown,) = opened(board, 1)
        board.close(hidden, 200, client_left=False)
        board.close(shown, 200, client_left=True)

    _, events = console_sees(feed, requests)
    assert [(e["id"], e["outcome"]) for e in events] == [(1, "running"), (1, "cancelled")]


def test_refresh_sends_a_running_request_again_only_once_it_changed() -> None:
    feed = LiveFeed()
    board = Activity(feed)
    (ticket,) = opened(board, 1)
    running = job(served_by=None)

    def changes() -> None:
        board.refresh()  # first heard of: sent
        board.refresh()  # unchanged: not sent
        ticket.jobs.append(running)
        ticket.model = "m"
        board.refresh()  # its model is known
        running.served_by = "engine-0"
        running.first_at = ticket.started
        board.refresh()  # its engine and first token are known
        board.refresh()

    _, events = console_sees(feed, changes)
    assert [(e["model"], e["engine"], e["ttft_ms"]) for e in events] == [
        (None, None, None),
        ("m", None, None),
        ("m", "engine-0", 0.0),
    ]


def test_refresh_builds_nothing_while_no_console_watches() -> None:
    board = Activity(LiveFeed())
    (ticket,) = opened(board, 1)
    board.refresh()
    assert ticket.sent == ()  # so a console that connects later is sent it


def test_refresh_skips_the_requests_that_ended() -> None:
    feed = LiveFeed()
    board = Activity(feed)
    first, _ = opened(board, 2)

    def end_then_refresh() -> None:
        board.close(first, 200, client_left=False)
        board.refresh()

    _, events = console_sees(feed, end_then_refresh)
    assert [(e["id"], e["outcome"]) for e in events] == [(1, "completed"), (2, "running")]


# ---- the current request -------------------------------------------------------------


def test_jobs_attach_to_the_current_request_whose_model_is_its_first_jobs() -> None:
    activity.attach(job(1, "outside"))  # no request: nothing to count it in
    ticket = Activity(LiveFeed()).open("/v1/completions", None, None, shown=True)
    first, second = job(1, "small"), job(2, "big")
    activity.attach(first)
    activity.attach(second)
    assert ticket.jobs == [first, second]
    assert ticket.model == "small"


def test_a_stream_that_begins_marks_the_current_request() -> None:
    activity.streaming()  # no request: nothing to mark
    ticket = Activity(LiveFeed()).open("/v1/completions", None, None, shown=False)
    assert not ticket.stream
    activity.streaming()
    assert ticket.stream


def test_any_model_may_be_used_outside_a_request_or_without_a_key() -> None:
    entry = ModelEntry(id="big", format="fake")
    assert activity.may_use(entry)
    Activity(LiveFeed()).open("/v1/completions", None, "admin", shown=True)
    assert activity.may_use(entry)
    activity.check_model(entry)


def test_a_key_limited_to_models_may_use_them_by_id_or_alias_and_no_other() -> None:
    key, _ = api_keys.create("ci", models=("small",))
    Activity(LiveFeed()).open("/v1/completions", key, None, shown=True)
    assert activity.may_use(ModelEntry(id="small", format="fake"))
    assert activity.may_use(ModelEntry(id="small-v2", alias="small", format="fake"))
    big = ModelEntry(id="big", format="fake")
    assert not activity.may_use(big)
    with pytest.raises(ModelNotAllowed) as refused:
        activity.check_model(big)
    assert refused.value.status == 403 and refused.value.param == "model"
    assert "'big'" in refused.value.message
