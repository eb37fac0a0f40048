"""The console's live feed: one SSE stream per open console (`GET /admin/api/events`), of
what the front's live feed (live_feed.py) publishes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator

from aiohttp import web

from coderai.front.auth.activity import STREAMING
from coderai.front.live_feed import LiveFeed


async def stream(request: web.Request, feed: LiveFeed) -> web.StreamResponse:
    """GET /admin/api/events: the snapshots, then every change, until the console leaves."""
    return await serve_events(request, feed.subscribe())


async def serve_events(
    request: web.Request, batches: AsyncGenerator[list[bytes], None]
) -> web.StreamResponse:
    """An SSE response of `batches` of encoded events, until they end (shutdown) or the
    client goes away: that cancels this handler, or fails its next write."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    request[STREAMING] = True
    with contextlib.suppress(ConnectionResetError):
        async with contextlib.aclosing(batches):
            async for batch in batches:
                # the first batch may be empty: writing it still sends the headers
                await response.write(b"".join(batch))
        await response.write_eof()
    return response
