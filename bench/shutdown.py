"""SIGTERM with requests in flight: is each one accounted for, and how long does exit take?

Starts `coderai run` with one engine (20 slots, a 20 tokens/s fake model), opens 20 long
streams and 5 more requests that queue (3 streamed, 2 whole), sends SIGTERM and reports,
for each request, how it ended: an error event then a proper end of the chunked body, a
503, a [DONE], or cut (the body ended without its terminator, or never answered).

    python -m bench.shutdown [--grace 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from collections import Counter
from typing import Any

import aiohttp

from bench.lib.server import BenchServer
from tests.support.sse import DONE, aiter_frames

SLOW = {"id": "slow", "format": "fake", "options": {"tokens_per_second": 20,
                                                    "output_tokens": 100_000}}  # fmt: skip


async def _request(session: aiohttp.ClientSession, url: str, stream: bool,
                   started: asyncio.Event) -> str:  # fmt: skip
    body = {"model": "slow", "prompt": "p", "max_tokens": 50_000, "stream": stream}
    try:
        async with session.post(url + "/v1/completions", json=body) as r:
            if r.status != 200:
                started.set()
                return f"HTTP {r.status}"
            if not stream:
                return "whole 200"
            last: dict[str, Any] = {}
            # whole events only: a line the cut left half-written is not one
            async for frame in aiter_frames(r.content):
                if frame.comment is None:
                    last = frame.json()
                    started.set()
            if last is DONE:
                return "stream [DONE]"
            if "error" in last:
                return f"stream error event ({last['error']['code']})"
            return "stream ended without a last event"
    except aiohttp.ClientPayloadError:
        return "stream cut inside the chunked body"
    except aiohttp.ClientError as exc:
        return f"no answer ({type(exc).__name__})"


async def scenario(grace: float) -> dict[str, Any]:
    srv = BenchServer({"max_parallel_requests": 20, "shutdown_grace_seconds": grace,
                       "queue_timeout": 600}, [SLOW], engines=1)  # fmt: skip
    timeout = aiohttp.ClientTimeout(total=grace * 4 + 60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        flags = [asyncio.Event() for _ in range(20)]
        streams = [asyncio.create_task(_request(session, srv.url, True, f)) for f in flags]
        await asyncio.wait_for(asyncio.gather(*(f.wait() for f in flags)), 30)
        queued = [asyncio.create_task(_request(session, srv.url, i < 3, asyncio.Event()))
                  for i in range(5)]  # fmt: skip
        while srv.health().get("queued") != 5:
            await asyncio.sleep(0.05)
        sent = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        exit_code = await loop.run_in_executor(None, srv.proc.wait, grace * 4 + 30)
        exited_after = time.monotonic() - sent
        results = await asyncio.gather(*streams, *queued)
    return {
        "grace_seconds": grace,
        "exit_code": exit_code,
        "exit_seconds_after_sigterm": round(exited_after, 2),
        "streams": dict(Counter(results[:20])),
        "queued": dict(Counter(results[20:])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grace", type=float, default=2.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(scenario(args.grace))))


if __name__ == "__main__":
    main()
