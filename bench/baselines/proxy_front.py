"""The original design, as a baseline: an aiohttp reverse proxy in front of engine processes
on internal ports, forwarding each response's bytes as they come (no parsing).

    python -m bench.baselines.proxy_front --port 8000 --engines 8780,8781
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web


class Upstream:
    """Round-robin over the engines' ports, through one client session."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = itertools.cycle(ports)
        self.session: aiohttp.ClientSession | None = None


UPSTREAM = web.AppKey("upstream", Upstream)


async def proxy(request: web.Request) -> web.StreamResponse:
    upstream_ref = request.app[UPSTREAM]
    assert upstream_ref.session is not None
    body = await request.read()
    url = f"http://127.0.0.1:{next(upstream_ref.ports)}{request.path}"
    async with upstream_ref.session.post(url, data=body, headers={
        "Content-Type": request.headers.get("Content-Type", "application/json")
    }) as upstream:  # fmt: skip
        response = web.StreamResponse(
            status=upstream.status,
            headers={"Content-Type": upstream.headers.get("Content-Type", "text/plain")},
        )
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--engines", required=True, help="comma-separated internal ports")
    args = parser.parse_args()
    app = web.Application()
    upstream = app[UPSTREAM] = Upstream([int(p) for p in args.engines.split(",")])

    async def session(app: web.Application) -> AsyncIterator[None]:
        upstream.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
        )
        yield
        await upstream.session.close()

    app.cleanup_ctx.append(session)
    app.router.add_post("/v1/chat/completions", proxy)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
