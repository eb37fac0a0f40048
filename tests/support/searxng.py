"""A stand-in for a SearXNG instance (the one stand-in the search tests may use: this
machine reaches no search engine), speaking SearXNG's JSON API: `GET /search?q=...&format=
json` answers `{"query", "number_of_results", "results": [{"url", "title", "content",
"engine", "publishedDate"}]}`. It also serves the pages its results point at (`/page/N`,
HTML), so a fetch of a result has somewhere to go. It records the queries it was asked."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web

from tests.support.media import png
from tests.support.server import free_port

#: the words of /big (five bytes each)
BIG_WORDS = 100_000
PAGE = """<html><head><title>Page {n}</title><style>p {{color: red}}</style></head>
<body><h1>Result {n}</h1><p>CoderAI serves models to coding agents.</p>
<script>ignored()</script><p>Page number {n}.</p></body></html>"""


@dataclass
class Standin:
    url: str
    queries: list[str] = field(default_factory=list)

    def results(self, query: str) -> list[dict[str, str]]:
        """Three results for any query: two pages it serves, one on another host."""
        urls = [f"{self.url}/page/1", f"{self.url}/page/2", "https://blog.example.net/post/3"]
        return [
            {"url": url, "title": f"{query} result {n}", "content": f"Snippet {n} about {query}.",
             "engine": "standin", "publishedDate": f"2026-11-0{n}T00:00:00"}
            for n, url in enumerate(urls, 1)
        ]  # fmt: skip


def _app(standin: Standin) -> web.Application:
    async def search(request: web.Request) -> web.Response:
        query = request.query.get("q", "")
        if request.query.get("format") != "json":
            return web.Response(status=403, text="format not enabled")
        standin.queries.append(query)
        results = standin.results(query)
        return web.json_response(
            {"query": query, "number_of_results": len(results), "results": results}
        )

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE.format(n=request.match_info["n"]), content_type="text/html")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query.get("to", "/page/1"))

    async def big(request: web.Request) -> web.Response:
        # far more than one read of the network gives: a fetch must read it all
        return web.Response(text="word " * BIG_WORDS, content_type="text/plain")

    async def image(request: web.Request) -> web.Response:
        return web.Response(body=png(64, 48), content_type="image/png")

    app = web.Application()
    app.router.add_get("/image.png", image)
    app.router.add_get("/search", search)
    app.router.add_get("/page/{n}", page)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/big", big)
    return app


@contextlib.contextmanager
def running() -> Iterator[Standin]:
    """The stand-in on a free port, in a thread of its own, for the block's length."""
    port = free_port()
    standin = Standin(f"http://127.0.0.1:{port}")
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(_app(standin))
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10), "the SearXNG stand-in did not start"
    try:
        yield standin
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
