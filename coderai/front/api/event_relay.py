"""One chat job's output for the APIs that translate at the edge (Anthropic's Messages,
OpenAI's Responses): collected whole, or relayed to the client as the API's own events.

Chat completions keep their paths in api/openai/routes.py (the plain-text template and several
choices); these APIs ask for one choice and render their events through a `Renderer`.
Their text deltas are template fills too (`EventTemplate`): JSON encoded once around
stand-ins, so an event costs one string escape and a few concatenations. Tool-call,
block and closing events are rarer and are built as dicts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any, Protocol

from aiohttp import web

from coderai.bus.messages import Done, Prompt
from coderai.errors import CoderaiError
from coderai.front.api.openai.reply import dumps
from coderai.front.api.stream_io import Advance, Preamble, Refuse, open_stream, relay
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.output import CallPiece, Collected, Piece, texts_and_calls
from coderai.front.metrics import Metrics


def sse(name: str, obj: object) -> bytes:
    """A named event, as both APIs frame them (their SDKs dispatch on the event line)."""
    return b"event: " + name.encode() + b"\ndata: " + dumps(obj) + b"\n\n"


class EventTemplate:
    """An event encoded once around stand-in strings, filled per event. A text value
    fills its stand-in as a JSON string, an int as a JSON number."""

    def __init__(self, name: str, obj: dict[str, Any], *marks: str) -> None:
        parts = [sse(name, obj)]
        for mark in marks:  # in the order they appear in obj
            before, after = parts.pop().split(dumps(mark), 1)
            parts += [before, after]
        self.parts = parts

    def fill(self, *values: str | int) -> bytes:
        out = self.parts[0]
        for value, part in zip(values, self.parts[1:], strict=True):
            encoded = encode_basestring(value) if isinstance(value, str) else str(value)
            out += encoded.encode() + part
        return out


def render(
    items: list[str | Piece],
    text: Callable[[str], bytes],
    call: Callable[[CallPiece], bytes],
    thought: Callable[[str], bytes] | None = None,
) -> bytes:
    """A renderer's events for what arrived: its reasoning, text and call events, in
    order (reasoning left out where the API's renderer has no `thought`)."""
    out = b""
    for item in texts_and_calls(items):
        if isinstance(item, str):
            out += text(item)
        elif item.reasoning:
            out += thought(item.reasoning) if thought is not None else b""
        else:
            for piece in item.calls:
                out += call(piece)
    return out


class Renderer(Protocol):
    """The events of one streamed answer in an API's own shape."""

    def opening(self, prompt: Prompt | None) -> bytes: ...

    def keepalive(self, prompt: Prompt | None) -> bytes: ...

    def items(self, items: list[str | Piece]) -> bytes: ...

    def closing(self, done: Done) -> bytes: ...

    def error(self, error: CoderaiError) -> bytes: ...

    def settling(self) -> bool:
        """After the job's end, whether the answer still waits for work of the front's own
        (Anthropic's server tools run their calls: anthropic/reply.py) before it closes;
        that work wakes the job when done."""
        ...


async def collect(job: FrontJob) -> Collected:
    """A whole answer: everything the job produced, once it has ended."""
    got = Collected()
    while True:
        for item in job.take_items():
            got.add(item)
        if job.outcome is not None:
            return got
        await job.wait()


async def stream(
    request: web.Request,
    dispatcher: Dispatcher,
    metrics: Metrics,
    job: FrontJob,
    renderer: Renderer,
    refuse: Refuse,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    keepalive = dispatcher.settings.stream_keepalive_seconds
    response = await open_stream(request, [job], refuse, keepalive, headers)
    if not response.prepared:
        return response
    dispatcher.streams.add(job)
    try:
        preamble = Preamble(renderer.opening, renderer.keepalive, keepalive)
        advance = _advance(dispatcher, metrics, job, renderer)
        await relay(request, response, [job], preamble, advance, renderer.error)
    finally:
        dispatcher.streams.discard(job)
    return response


def _advance(
    dispatcher: Dispatcher, metrics: Metrics, job: FrontJob, renderer: Renderer
) -> Advance:
    """The job's events in the renderer's shape as they come, and its end."""
    first = True

    def advance() -> tuple[bytes, bool]:
        nonlocal first
        out = b""
        items = job.take_items()
        if items:
            if first:  # the same time to first token as chat completions' streams report
                metrics.ttft.observe(time.monotonic() - job.enqueued_at)
                first = False
            if job.held:  # the client caught up with what was held for it
                dispatcher.resume(job)
            out = renderer.items(items)
        outcome = job.outcome
        if isinstance(outcome, Done):
            if renderer.settling():
                return out, False
            out += renderer.closing(outcome)
        elif isinstance(outcome, CoderaiError):
            out += renderer.error(outcome)
        return out, outcome is not None

    return advance
