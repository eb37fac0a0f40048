"""What every streamed response does at its edges, whatever its wire format: open the
stream once its prompt is admitted, keep it alive while the prompt is read, write its
events with the stall reaper's interruption handled, and leave a cut stream's last event
in the socket.

A stream opens (status line, headers, the API's opening event) as soon as an engine has
admitted its prompt (PROMPT: counted, and so known to fit the context), not at the first
token: on a CPU a long prompt takes minutes to read, and agents give up on a connection
that has said nothing (Claude Code after 360 s, then retries from scratch). Until then
an error is still a status code. A job on an engine whose prompt is not admitted within
the keep-alive interval (its model loading) opens the stream anyway; an error after that
is an event. A job in the front's queue keeps its status codes.
While the prompt is read the stream carries its progress and a keep-alive at that
interval (an SSE comment, and Anthropic's `ping`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from aiohttp import HttpVersion11, web

from coderai.bus.messages import Prompt
from coderai.errors import CoderaiError, StreamStalled
from coderai.front.auth import activity
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.http import ENGINE_HEADER, FRONT

#: how long a cut stream's client has to read its last event before the connection drops
LAST_READ_SECONDS = 30.0

#: answers a request whose job failed before its first output, in the API's error shape
Refuse = Callable[[CoderaiError, str | None], web.Response]


async def open_stream(
    request: web.Request,
    jobs: list[FrontJob],
    refuse: Refuse,
    keepalive: float,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """The stream's response, prepared once a prompt is admitted, a job has output, or
    all have ended, or once a job on an engine (its model loading, say) has waited
    `keepalive` seconds for any of these. Until then an error can still be a status code:
    a job that failed first is answered by `refuse` instead. A request in the front's own
    queue keeps its status codes (429, 503 at queue_timeout), which clients retry on. The
    engine header names the engine that admitted or served it. Every job gets this
    handler as its writer (so a lagging client holds them all). The caller's first write
    sends the headers (aiohttp holds them until then)."""
    deadline = time.monotonic() + keepalive
    while not _ready(jobs):  # the jobs of one request share one wake-up
        if time.monotonic() < deadline:
            await wait_until(jobs[0], deadline)
        elif any(j.dispatched for j in jobs):
            break
        else:
            await jobs[0].wait()  # queued past the deadline: its dispatch wakes it
    failed = next((j for j in jobs if isinstance(j.outcome, CoderaiError)), None)
    if failed is not None and isinstance(failed.outcome, CoderaiError):
        return refuse(failed.outcome, failed.served_by)
    served_by = next((j.served_by for j in jobs if j.served_by), None)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            ENGINE_HEADER: served_by or FRONT,
            **(headers or {}),
        }
    )
    await response.prepare(request)
    activity.streaming()
    for job in jobs:
        job.writer = asyncio.current_task()
    return response


def _ready(jobs: list[FrontJob]) -> bool:
    """Whether a stream can open: a prompt is admitted, a job has output or has failed,
    or all have ended."""
    return (
        any(j.prompt is not None or j.started for j in jobs)
        or any(isinstance(j.outcome, CoderaiError) for j in jobs)
        or all(j.outcome is not None for j in jobs)
    )


async def wait_until(job: FrontJob, deadline: float) -> None:
    """Wait for the job's wake-up, or until the deadline (monotonic). A timer sets the
    same event, so waiting costs no extra task."""
    left = deadline - time.monotonic()
    if left <= 0:
        return
    timer = asyncio.get_running_loop().call_later(left, job.wake.set)
    try:
        await job.wait()
    finally:
        timer.cancel()


def progress_comment(prompt: Prompt | None) -> bytes:
    """A keep-alive that says how far the prompt is read: an SSE comment, which every SSE
    client skips and a person or a script watching the stream can read."""
    if prompt is None:
        return b": waiting for the model\n\n"
    return b": prompt %d/%d tokens read, %d cached\n\n" % (
        prompt.read,
        prompt.tokens,
        prompt.cached,
    )


class Preamble:
    """What a stream sends before its first output: the API's opening event once a
    prompt is admitted (or output or the end comes first), then, while the prompt is read,
    a keep-alive with its progress whenever the progress changed or `interval` passed.
    The first call always sends something, which carries the headers. Once output has
    come it sends nothing more, and its wait is the jobs' own."""

    __slots__ = ("_due", "_interval", "_keepalive", "_opening", "_over", "_read", "_spoke")

    def __init__(
        self,
        opening: Callable[[Prompt | None], bytes],
        keepalive: Callable[[Prompt | None], bytes],
        interval: float,
    ) -> None:
        #: None once sent
        self._opening: Callable[[Prompt | None], bytes] | None = opening
        self._keepalive = keepalive
        self._interval = interval
        self._due = 0.0
        self._read: tuple[int, int] | None = None
        self._spoke = False
        self._over = False

    def events(self, jobs: Sequence[FrontJob]) -> bytes:
        """What to send now, ahead of any output."""
        if self._over:
            return b""
        prompt = next((j.prompt for j in jobs if j.prompt is not None), None)
        waiting = not any(j.started or j.outcome is not None for j in jobs)
        self._over = not waiting
        if self._opening is not None and (prompt is not None or not waiting):
            # an API whose stream opens with nothing (a completion) still says something
            opening = self._opening(prompt) or (self._keepalive(prompt) if waiting else b"")
            self._opening = None
            return self._sent(prompt, opening)
        if not waiting:
            return b""
        progress = prompt is not None and (prompt.read, prompt.tokens) != self._read
        if self._spoke and not progress and time.monotonic() < self._due:
            return b""
        return self._sent(prompt, self._keepalive(prompt))

    def _sent(self, prompt: Prompt | None, events: bytes) -> bytes:
        self._spoke = True
        self._due = time.monotonic() + self._interval
        if prompt is not None:
            self._read = (prompt.read, prompt.tokens)
        return events

    async def wait(self, jobs: Sequence[FrontJob]) -> None:
        """Wait for the jobs' wake-up; before their first output, no longer than until
        the next keep-alive is due."""
        if self._over:
            await jobs[0].wait()
        else:
            await wait_until(jobs[0], self._due)


#: a stream's events as its jobs produce them: those ready now (each call takes them),
#: and whether the stream ends with them
Advance = Callable[[], tuple[bytes, bool]]


async def relay(
    request: web.Request,
    response: web.StreamResponse,
    jobs: Sequence[FrontJob],
    preamble: Preamble,
    advance: Advance,
    cut_event: Callable[[CoderaiError], bytes],
    written: Callable[[], None] | None = None,
) -> None:
    """The one loop of every streamed answer, whatever its wire format: its preamble, then
    what `advance` has ready, written as it comes (the last events with the chunked
    terminator, in one write), until the end or until the stream is cut. `written` is
    told after each write. The first job stands for the stream with the stall reaper."""
    lead = jobs[0]
    while True:
        pending = preamble.events(jobs)
        events, last = advance()
        pending += events
        if pending:
            since = time.monotonic()
            if not await write_events(request, response, lead, pending, last, cut_event, since):
                return
            if written is not None:
                written()
        if last:
            return
        await preamble.wait(jobs)


async def write_events(
    request: web.Request,
    response: web.StreamResponse,
    job: FrontJob,
    events: bytes,
    last: bool,
    cut_event: Callable[[CoderaiError], bytes],
    since: float,
) -> bool:
    """Write events (the last ones with the chunked terminator); False if the stream was
    cut instead. A write waits while the client's socket is full; the dispatcher's reaper
    ends one that waits past stream_stall_timeout by cancelling this task (a timeout per
    write would cost more than the write on the hot path)."""
    job.writing_since = since
    try:
        if last:
            await response.write_eof(events)
        else:
            await response.write(events)
        return True
    except asyncio.CancelledError:
        if not job.interrupted:
            raise  # the client went away
        task = asyncio.current_task()
        assert task is not None
        task.uncancel()
        # a cut final write has already put its events and terminator in the buffer;
        # otherwise the stream ends with the reason it was cut
        abandon_stream(request, response, b"" if last else cut_event(cut_reason(job)))
        return False
    finally:
        job.writing_since = None


def chunk(data: bytes) -> bytes:
    """One chunk of HTTP/1.1 chunked encoding, framed by us where aiohttp's writer is not
    used (the callback's writes, a cut stream's last event)."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def cut_reason(job: FrontJob) -> CoderaiError:
    """Why a stream was cut: its error (stalled, shutting down), even when the engine's DONE
    arrived while the handler waited for the client."""
    if isinstance(job.outcome, CoderaiError):
        return job.outcome
    return StreamStalled("the client stopped reading")


def abandon_stream(request: web.Request, response: web.StreamResponse, last: bytes) -> None:
    """End a stream whose client stopped reading: its last event, if any, goes into the
    socket's buffer without waiting for room (aiohttp's write would wait), the connection
    closes once the client has read it, and is dropped if it has not within
    LAST_READ_SECONDS (holding it longer would only hold memory)."""
    transport = request.transport
    if transport is None or transport.is_closing():
        return
    response.force_close()
    # aiohttp chunks a body of unknown length for HTTP/1.1 (our streams never set one)
    if last and request.version >= HttpVersion11:
        last = chunk(last) + b"0\r\n\r\n"
    transport.write(last)
    transport.close()
    asyncio.get_running_loop().call_later(LAST_READ_SECONDS, transport.abort)
