"""/admin/api/logs: the recent lines of the front or of one engine, whole or streamed.

`?source=` names the source ("front", the default, or an engine); `?lines=N` how many of
its recent lines to send (all it keeps when absent; 0 on a stream: only new ones).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from coderai.errors import InvalidRequest, NotFound
from coderai.front.console.events import serve_events
from coderai.front.http import ADMIN_PREFIX as PREFIX
from coderai.front.logbook import FRONT, LogBook, capturing


class LogsRoutes:
    def __init__(self, book: LogBook) -> None:
        self.book = book

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(PREFIX + "logs", self.recent)
        app.router.add_get(PREFIX + "logs/stream", self.stream)
        app.cleanup_ctx.append(self._capture)
        # before aiohttp waits for the handlers still running: open streams end at once
        # instead of holding the shutdown for its timeout
        app.on_shutdown.append(self._end_streams)

    async def _capture(self, app: web.Application) -> AsyncIterator[None]:
        with capturing(self.book):
            yield

    async def _end_streams(self, app: web.Application) -> None:
        self.book.end_streams()

    def _source(self, request: web.Request) -> str:
        source = request.query.get("source", FRONT)
        sources = self.book.sources()
        if source not in sources:
            known = ", ".join(sources)
            raise NotFound(f"no log source {source!r} (there are: {known})", param="source")
        return source

    async def recent(self, request: web.Request) -> web.Response:
        source = self._source(request)
        lines = self.book.lines(source, _count(request))
        return web.json_response({"source": source, "lines": lines})

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """`event: log` per line: the recent ones, then each new one. A client that goes
        away cancels this handler (or fails its next write); one that stops reading holds
        it in a write while its backlog in the book stays bounded."""
        source = self._source(request)
        return await serve_events(request, self.book.follow(source, _count(request)))


def _count(request: web.Request) -> int | None:
    raw = request.query.get("lines")
    if raw is None:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        message = f"lines must be a whole number, 0 or more (got {raw!r})"
        raise InvalidRequest(message, param="lines")
    return n
