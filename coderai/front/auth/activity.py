"""What the console's Activity page shows: the API requests running now and the last ones
that ended, each with its model, engine, key, tokens, time to first token and outcome.

One `Ticket` per API request, opened by the auth gate before the handler runs and closed
after it; the jobs the handler submits attach to the ticket of the task that runs it (a
context variable, so the many routes that submit jobs need not pass it along). Everything
here is the front's own state: reading it never waits on an engine.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from coderai.bus.kinds import FinishReason
from coderai.bus.messages import Done
from coderai.catalogue.entries import ModelEntry
from coderai.errors import ModelNotAllowed
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.live_feed import LiveFeed
from coderai.state.api_keys import ApiKey

#: ended requests the console can list
#: set on a request once its answer is a live stream (console/events.py): the gate ends
#: such a stream when its console session ends
STREAMING = "coderai_streaming"
RECENT = 200


@dataclass(eq=False)
class Ticket:
    id: int
    route: str
    key: ApiKey | None
    #: who made it, when not a key: "admin" (the admin key) or "console:<user>"
    caller: str | None = None
    started_at: float = field(default_factory=time.time)
    started: float = field(default_factory=time.monotonic)
    model: str | None = None
    jobs: list[FrontJob] = field(default_factory=list)
    stream: bool = False
    status: int | None = None
    outcome: str = "running"
    ended: float | None = None
    #: what the console was last sent of it while it ran (see Activity.refresh)
    sent: tuple[object, ...] = ()

    @property
    def key_name(self) -> str | None:
        return self.key.name if self.key is not None else self.caller

    def tokens(self) -> tuple[int, int]:
        """(prompt, completion) tokens of the jobs that have ended."""
        done = [j.outcome for j in self.jobs if isinstance(j.outcome, Done)]
        return sum(d.prompt_tokens for d in done), sum(d.completion_tokens for d in done)

    def end(self, status: int, client_left: bool) -> None:
        self.status = status
        self.ended = time.monotonic()
        self.outcome = _outcome(status, client_left, self.jobs)

    def public(self) -> dict[str, Any]:
        prompt, completion = self.tokens()
        firsts = [j.first_at for j in self.jobs if j.first_at is not None]
        engines = sorted({j.served_by for j in self.jobs if j.served_by})
        end = self.ended if self.ended is not None else time.monotonic()
        return {
            "id": self.id,
            "route": self.route,
            "model": self.model,
            "engine": ",".join(engines) or None,
            "key": self.key_name,
            "stream": self.stream,
            "started_at": self.started_at,
            "ttft_ms": round((min(firsts) - self.started) * 1000, 1) if firsts else None,
            "duration_ms": round((end - self.started) * 1000, 1),
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "status": self.status,
            "outcome": self.outcome,
        }


def _outcome(status: int, client_left: bool, jobs: list[FrontJob]) -> str:
    if client_left:
        return "cancelled"
    if status >= 400 or any(j.outcome is not None and not isinstance(j.outcome, Done)
                            for j in jobs):  # fmt: skip
        return "error"  # a stream that began (200) and was cut ends with an error event
    if any(isinstance(j.outcome, Done) and j.outcome.finish_reason == FinishReason.CANCELLED
           for j in jobs):  # fmt: skip
        return "cancelled"
    return "completed"


#: the ticket of the request the current task serves, if it is an API request
CURRENT: ContextVar[Ticket | None] = ContextVar("coderai_ticket", default=None)


class Activity:
    def __init__(self, feed: LiveFeed) -> None:
        self.feed = feed
        self.running: dict[int, Ticket] = {}
        self.recent: deque[Ticket] = deque(maxlen=RECENT)
        self._next_id = 0
        feed.snapshot("activity", self.snapshot)

    def open(self, route: str, key: ApiKey | None, caller: str | None, shown: bool) -> Ticket:
        """A request's ticket; a `shown` one is listed (model listings are not: agents
        poll them, and they would push the requests that did work off the list)."""
        ticket = Ticket(0, route, key, caller)
        CURRENT.set(ticket)
        if shown:
            self._next_id += 1
            ticket.id = self._next_id
            self.running[ticket.id] = ticket
            if self.feed.watched:
                self.feed.publish("request", ticket.public())
        return ticket

    def close(self, ticket: Ticket, status: int, client_left: bool) -> None:
        ticket.end(status, client_left)
        if self.running.pop(ticket.id, None) is None:
            return
        self.recent.appendleft(ticket)
        if self.feed.watched:
            self.feed.publish("request", ticket.public())

    def refresh(self) -> None:
        """Send the console the running requests whose model, engine, first token or
        tokens changed since it last heard of them: a request opens before its model is
        known and its engine is known only once it has output."""
        if not self.feed.watched:
            return
        for ticket in self.running.values():
            view = ticket.public()
            state = tuple(view[k] for k in ("model", "engine", "ttft_ms", "completion_tokens"))
            if state != ticket.sent:
                ticket.sent = state
                self.feed.publish("request", view)

    async def refreshing(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self.refresh()

    def snapshot(self) -> dict[str, Any]:
        running = sorted(self.running.values(), key=lambda t: -t.id)
        return {
            "running": [t.public() for t in running],
            "recent": [t.public() for t in self.recent],
        }


def streaming() -> None:
    """The current request's answer is a stream that has begun (its 200 is sent)."""
    ticket = CURRENT.get()
    if ticket is not None:
        ticket.stream = True


def share() -> tuple[str, float]:
    """Who the current request's jobs are queued for, in fair share (dispatch/queue.py),
    and with what weight: its API key and the key's weight, else its caller (the admin
    key, a console user) at weight 1; "" outside a request."""
    ticket = CURRENT.get()
    if ticket is None:
        return "", 1.0
    if ticket.key is not None:
        return f"key:{ticket.key.id}", ticket.key.weight
    return ticket.caller or "", 1.0


def attach(job: FrontJob) -> None:
    """Count a submitted job in its request's ticket (jobs submitted outside an API
    request, e.g. by tests driving the dispatcher, have none)."""
    ticket = CURRENT.get()
    if ticket is not None:
        ticket.jobs.append(job)
        if ticket.model is None:
            ticket.model = job.entry.id


def may_use(entry: ModelEntry) -> bool:
    """Whether the current request's API key may use this model."""
    ticket = CURRENT.get()
    return ticket is None or ticket.key is None or ticket.key.allows(entry.names())


def check_model(entry: ModelEntry) -> None:
    """ModelNotAllowed (403) if the current request's API key may not use this model."""
    if not may_use(entry):
        raise ModelNotAllowed(f"this API key may not use the model {entry.id!r}", param="model")
