"""The hot path: a plain-text stream (one choice of /v1/chat/completions or /v1/completions,
no tool calls, no logprobs), relayed to its client one event per token.

Where real models stream, each token arrives in its own CHUNKS message and becomes its own
SSE event, so what the front spends per event is what it costs. The request's handler
task opens the stream and writes its first events (with the headers) and its last ones
(with the chunked terminator); in between, each content event is written by the bus
callback itself, straight into the client's transport (`TextStream.offer`). Measured with
`bench/relay.py` (equal events, paced) before this path existed, each event woke the
handler task (an asyncio.Event set and waited, a task switch) and went through aiohttp's
chunked writer; that was most of the front's CPU per event above the floor's.

The callback steps aside, leaving the text in the job for the handler, whenever writing
now could reorder the stream or ignore back-pressure:
- the handler has text waiting or a write of its own in flight (order);
- the transport is above its high-water mark (the client lags): the text waits in the job,
  merges with what follows into one event, and the handler's write waits for room (as
  aiohttp's writes do, once 64 KiB went out since the last wait; the callback's writes
  count), so the stall reaper and the engine's hold apply as on the handler's path;
- the transport is closing (the client left): the handler's write finds out and ends.
"""

from __future__ import annotations

import time

from aiohttp import HttpVersion11, web

from coderai.bus.messages import Done
from coderai.errors import CoderaiError
from coderai.front.api import stream_io
from coderai.front.api.openai.reply import StreamTemplate, error_event
from coderai.front.api.stream_io import Preamble, chunk, progress_comment
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.output import Piece, texts_and_calls
from coderai.front.metrics import Metrics


class TextStream:
    """One plain-text stream's content events: rendered, framed and timed, whichever path
    writes them. Its `last` write time is the one both paths share for the ITL metric."""

    __slots__ = ("_itl", "_protocol", "_reasoning", "_render", "_writer", "last")

    def __init__(self, template: StreamTemplate, request: web.Request, metrics: Metrics) -> None:
        self._render = template.content
        self._reasoning = template.reasoning
        self._protocol = request.protocol
        self._writer = request.writer
        # bound once: the histogram's observe is the one metric call per event
        self._itl = metrics.itl.observe
        self.last: float | None = None

    def content(self, text: str) -> bytes:
        """A content event for the handler's own write (aiohttp frames it)."""
        self._written(time.monotonic())
        return self._render(text)

    def items(self, items: list[str | Piece]) -> bytes:
        """The events of texts and pieces (a reasoning model's output), in order: runs of
        each merged, so a client that lagged gets one event for what waited, not one per
        token (as on the translated APIs)."""
        self._written(time.monotonic())
        return b"".join(
            self._render(item) if isinstance(item, str) else self._reasoning(item.reasoning)
            for item in texts_and_calls(items)
        )

    def offer(self, text: str) -> bool:
        """Write text's event now, from the bus callback; False if it must wait for the
        handler (see the module's docstring)."""
        if not text:
            return True  # nothing to write: the handler's path makes no event of it either
        protocol = self._protocol
        transport = protocol.transport
        if transport is None or protocol.writing_paused or transport.is_closing():
            return False
        # framed here in one piece (aiohttp's writer would cut the same bytes in three and
        # join them again)
        framed = chunk(self._render(text))
        transport.write(framed)
        # counted as aiohttp counts its own writes: the handler's next write waits for the
        # client once 64 KiB went out since its last wait (the bound on a lagging client's
        # buffer, as before), and the access log has the body's size
        writer = self._writer
        writer.buffer_size += len(framed)
        writer.output_size += len(framed)
        self._written(time.monotonic())
        return True

    def _written(self, now: float) -> None:
        if self.last is not None:
            self._itl(now - self.last)
        self.last = now


async def relay(
    request: web.Request,
    response: web.StreamResponse,
    job: FrontJob,
    template: StreamTemplate,
    dispatcher: Dispatcher,
    metrics: Metrics,
) -> None:
    """The handler's side of a plain-text stream: everything the callback did not write,
    then the end. It hands the content events to the callback once the headers are out
    (aiohttp sends them with the first write) and the stream is chunked (HTTP/1.1)."""
    stream = TextStream(template, request, metrics)
    direct = request.version >= HttpVersion11
    preamble = Preamble(
        lambda _prompt: template.opening(),
        progress_comment,
        dispatcher.settings.stream_keepalive_seconds,
    )

    def advance() -> tuple[bytes, bool]:
        out = b""
        if job.pieces:  # a reasoning model's: its thinking comes apart from its text
            items = job.take_items()
            if items:
                if job.held:
                    dispatcher.resume(job)
                if stream.last is None:
                    metrics.ttft.observe(time.monotonic() - job.enqueued_at)
                out = stream.items(items)
            text = ""
        else:
            text = job.take()
        if text:
            if job.held:  # the client caught up with what was held for it
                dispatcher.resume(job)
            if stream.last is None:
                metrics.ttft.observe(time.monotonic() - job.enqueued_at)
            out = stream.content(text)
        outcome = job.outcome
        # the last events, the chunked terminator (and, for a short answer, the headers)
        # leave in one write
        if isinstance(outcome, Done):
            out += template.closing(outcome)
        elif isinstance(outcome, CoderaiError):
            out += error_event(outcome)
        return out, outcome is not None

    def written() -> None:
        if direct and job.sink is None and stream.last is not None:
            job.sink = stream.offer  # headers and first content are out

    try:
        await stream_io.relay(request, response, [job], preamble, advance, error_event, written)
    finally:
        job.sink = None
