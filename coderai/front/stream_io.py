"""What every streamed response does at its two edges, whatever its wire format: open the
stream once the first output (or an error) is known, write its events with the stall
reaper's interruption handled, and leave a cut stream's last event in the socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import HttpVersion11, web

from coderai.errors import CoderaiError, StreamStalled
from coderai.front import activity
from coderai.front.http import ENGINE_HEADER, FRONT
from coderai.front.jobs import FrontJob

#: how long a cut stream's client has to read its last event before the connection drops
LAST_READ_SECONDS = 30.0

#: answers a request whose job failed before its first output, in the API's error shape
Refuse = Callable[[CoderaiError, str | None], web.Response]


async def open_stream(
    request: web.Request, jobs: list[FrontJob], refuse: Refuse
) -> web.StreamResponse:
    """The stream's response, prepared once a job has output (or all have ended); until
    then an error can still be a status code, and the engine header names the engine that
    really served it. A job that failed first is answered by `refuse` instead. Every job
    gets this handler as its writer (so a lagging client holds them all)."""
    while not _ready(jobs):
        await jobs[0].wait()  # the jobs of one request share one wake-up
    # nothing is written yet: a failure is still a status code
    failed = next((j for j in jobs if isinstance(j.outcome, CoderaiError)), None)
    if failed is not None and isinstance(failed.outcome, CoderaiError):
        return refuse(failed.outcome, failed.served_by)
    served_by = next((j.served_by for j in jobs if j.served_by), None)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            ENGINE_HEADER: served_by or FRONT,
        }
    )
    await response.prepare(request)  # aiohttp holds the headers until the first write
    activity.streaming()
    for job in jobs:
        job.writer = asyncio.current_task()
    return response


def _ready(jobs: list[FrontJob]) -> bool:
    """Whether a stream can open: a job has output, one has failed, or all have ended."""
    return (
        any(j.started for j in jobs)
        or any(isinstance(j.outcome, CoderaiError) for j in jobs)
        or all(j.outcome is not None for j in jobs)
    )


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
