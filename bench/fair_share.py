"""Fair share at admission: one key keeps the queue full, another sends one request at a
time; what the second waits, against the second alone.

    python -m bench.fair_share [--seconds 20] [--flood 32] [--service 0.2] [--think 0.5]
                               [--out PATH]

`coderai run` with one engine that runs one request at a time (`max_parallel_requests: 1`)
serving a fake model paced to `--service` seconds a request (10 tokens), so that the
front's queue is what is measured, not a model. Key A keeps `--flood` requests in flight
(each of its workers sends the next as the last is answered); key B sends one, waits
`--think` seconds after its answer, and sends the next. Three runs of `--seconds` each: B
alone, A alone, both. Reported: B's latency (send to answer) p50/p95 alone and beside A,
the ratio, A's and all requests' throughput.

What it does not show: a real model's steps (a fake engine speaks the real protocol), jobs
an engine holds beyond what its models run at once (they wait in the engine, in arrival
order), weights other than equal.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.lib.results import RESULTS, save
from bench.lib.server import BenchServer

ADMIN = "bench-fair-admin"
TOKENS = 10


def key(url: str, name: str) -> str:
    made = httpx.post(url + "/admin/api/keys", json={"name": name},
                      headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)  # fmt: skip
    made.raise_for_status()
    return str(made.json()["key"])


async def worker(url: str, secret: str, until: float, think: float, out: list[float]) -> None:
    """Send requests one after another until `until`; each latency goes to `out`."""
    body = {"model": "solo", "prompt": "x", "max_tokens": TOKENS}
    headers = {"Authorization": f"Bearer {secret}"}
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        while time.perf_counter() < until:
            began = time.perf_counter()
            async with session.post(url + "/v1/completions", json=body) as response:
                assert response.status == 200, await response.text()
                await response.read()
            out.append(time.perf_counter() - began)
            if think:
                await asyncio.sleep(think)


async def run(url: str, keys: dict[str, str], args: argparse.Namespace, flood: bool,
              single: bool) -> dict[str, Any]:  # fmt: skip
    until = time.perf_counter() + args.seconds
    a: list[float] = []
    b: list[float] = []
    tasks = []
    if flood:
        tasks += [worker(url, keys["a"], until, 0.0, a) for _ in range(args.flood)]
    if single:
        tasks.append(worker(url, keys["b"], until, args.think, b))
    began = time.perf_counter()
    await asyncio.gather(*tasks)
    seconds = time.perf_counter() - began
    out: dict[str, Any] = {"seconds": round(seconds, 2), "a_done": len(a), "b_done": len(b),
                           "per_second": round((len(a) + len(b)) / seconds, 2)}  # fmt: skip
    if b:
        b.sort()
        out["b_p50_s"] = round(statistics.median(b), 3)
        out["b_p95_s"] = round(b[min(len(b) - 1, int(0.95 * len(b)))], 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--flood", type=int, default=32)
    parser.add_argument("--service", type=float, default=0.2)
    parser.add_argument("--think", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=RESULTS / "fair_share.json")
    args = parser.parse_args()
    model = {"id": "solo", "format": "fake",
             "options": {"capacity": 1, "tokens_per_second": TOKENS / args.service}}  # fmt: skip
    server = BenchServer({"max_parallel_requests": 1}, [model], engines=1,
                         extra={"auth": {"admin_key": ADMIN}})  # fmt: skip
    try:
        keys = {"a": key(server.url, "flood"), "b": key(server.url, "single")}
        alone = asyncio.run(run(server.url, keys, args, flood=False, single=True))
        flood = asyncio.run(run(server.url, keys, args, flood=True, single=False))
        both = asyncio.run(run(server.url, keys, args, flood=True, single=True))
    finally:
        server.stop()
    result = {
        "flood": args.flood, "service_s": args.service, "think_s": args.think,
        "seconds": args.seconds, "b_alone": alone, "a_alone": flood, "both": both,
        "b_p95_ratio": round(both["b_p95_s"] / alone["b_p95_s"], 2),
        "b_p50_ratio": round(both["b_p50_s"] / alone["b_p50_s"], 2),
    }  # fmt: skip
    save(result, args.out)


if __name__ == "__main__":
    main()
