"""What open and waiting requests cost the front: RSS and CPU per 1,000 idle-but-open
streams, and per 10,000 queued requests.

    python -m bench.scale [--streams 1000] [--queued 10000] [--hold 10]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.results import RESULTS, save
from bench.lib.server import BenchServer, cpu_seconds
from tests.support.sse import aiter_frames

MIB = 1 << 20


async def wait_until(server: BenchServer, test: Any, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not test(await asyncio.to_thread(server.health)):
        if time.monotonic() > deadline:
            raise TimeoutError("the server did not reach the expected state")
        await asyncio.sleep(0.5)


async def hold(server: BenchServer, seconds: float) -> tuple[float, float]:
    """(front RSS in MiB at the end, front CPU seconds per second) over a quiet window."""
    cpu0, t0 = cpu_seconds([server.front]), time.monotonic()
    await asyncio.sleep(seconds)
    cpu = (cpu_seconds([server.front]) - cpu0) / (time.monotonic() - t0)
    return server.front.memory_info().rss / MIB, cpu


Request = Callable[[aiohttp.ClientSession], Coroutine[Any, Any, None]]


async def under_load(
    server: BenchServer,
    request: Request,
    count: int,
    reached: Callable[[], Awaitable[object]],
    seconds: float,
) -> dict[str, float]:
    """Front RSS and CPU idle, then with `count` requests in the state `reached` waits for."""
    await asyncio.sleep(1)
    base_rss, base_cpu = await hold(server, 2)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(request(session)) for _ in range(count)]
        await asyncio.wait_for(reached(), 300)
        rss, cpu = await hold(server, seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"rss_idle": base_rss, "cpu_idle": base_cpu, "rss": rss, "cpu": cpu}


# one token every 5 s: requests stay open and nearly silent
SILENT = {"tokens_per_second": 0.2, "output_tokens": 1_000_000}


async def open_streams(count: int, seconds: float) -> dict[str, Any]:
    model = {"id": "idle", "format": "fake", "options": SILENT}
    server = BenchServer({"max_parallel_requests": count // 2 + 1}, [model], engines=2)
    opened = asyncio.Event()
    started = 0

    async def stream(session: aiohttp.ClientSession) -> None:
        nonlocal started
        body = {"model": "idle", "prompt": "x", "stream": True}
        async with session.post(server.url + "/v1/completions", json=body) as r:
            async for frame in aiter_frames(r.content):
                if frame.comment is None:
                    started += 1
                    if started == count:
                        opened.set()
                    await asyncio.sleep(3600)

    try:
        m = await under_load(server, stream, count, opened.wait, seconds)
    finally:
        server.stop()
    return {
        "streams": count,
        "front_rss_idle_mib": m["rss_idle"],
        "front_rss_open_mib": m["rss"],
        "front_rss_per_1000_streams_mib": (m["rss"] - m["rss_idle"]) * 1000 / count,
        "front_cpu_idle": m["cpu_idle"],
        "front_cpu_open": m["cpu"],
    }


async def queue_requests(count: int, seconds: float) -> dict[str, Any]:
    # one slot, taken by a request that never ends: everything else waits in the front
    server = BenchServer(
        {"max_parallel_requests": 1, "max_queue": count + 10, "queue_timeout": 3600},
        [{"id": "slow", "format": "fake", "options": SILENT}],
        engines=1,
    )

    async def ask(session: aiohttp.ClientSession) -> None:
        body = {"model": "slow", "prompt": "x", "max_tokens": 2}
        async with session.post(server.url + "/v1/completions", json=body) as r:
            await r.read()

    async def queued() -> None:
        await wait_until(server, lambda h: h["queued"] >= count)

    try:
        m = await under_load(server, ask, count + 1, queued, seconds)
    finally:
        server.stop()
    return {
        "queued": count,
        "front_rss_idle_mib": m["rss_idle"],
        "front_rss_queued_mib": m["rss"],
        "front_rss_per_10000_queued_mib": (m["rss"] - m["rss_idle"]) * 10000 / count,
        "front_cpu_idle": m["cpu_idle"],
        "front_cpu_queued": m["cpu"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--queued", type=int, default=10000)
    parser.add_argument("--hold", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    args = parser.parse_args()
    result = {
        "benchmark": "scale",
        "open_streams": asyncio.run(open_streams(args.streams, args.hold)),
        "queued_requests": asyncio.run(queue_requests(args.queued, args.hold)),
    }
    save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
