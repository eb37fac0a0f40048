"""Relay benchmark: fake engines at full speed, N concurrent streams through the front.

Throughput is measured with wrk (a C load generator that is not the bottleneck), latency
(TTFT, inter-chunk gaps) with an asyncio client at the same concurrency, and the front
process's CPU time per delivered token from its own rusage, all in one run.

    python bench/relay.py [--concurrency 1,16,64,256] [--duration 5] [--engines 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.server import BenchServer, cpu_seconds

RESULTS = Path(__file__).resolve().parent / "results"


def request_body(tokens: int) -> dict[str, Any]:
    return {
        "model": "fast",
        "stream": True,
        "max_tokens": tokens,
        "messages": [{"role": "user", "content": "benchmark"}],
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_wrk(url: str, concurrency: int, duration: float, tokens: int) -> dict[str, float]:
    """Complete streamed requests per second, as wrk counts them."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(
            'wrk.method = "POST"\n'
            'wrk.headers["Content-Type"] = "application/json"\n'
            f"wrk.body = [[{json.dumps(request_body(tokens))}]]\n"
        )
    threads = max(1, min(2, concurrency))
    cmd = ["wrk", f"-t{threads}", f"-c{concurrency}", f"-d{int(duration)}s", "-s", lua.name,
           url + "/v1/chat/completions"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    Path(lua.name).unlink()
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {
        "requests": requests,
        "non_2xx": int(errors.group(1)) if errors else 0,
        "socket_errors": socket_errors.group(1) if socket_errors else "",  # type: ignore[dict-item]
    }


async def latency_client(
    url: str, concurrency: int, duration: float, tokens: int
) -> dict[str, float]:
    """TTFT = request sent -> first content chunk; ITL = gaps between content chunks."""
    ttft: list[float] = []
    itl: list[float] = []
    completed = 0
    body = request_body(tokens)
    deadline = time.perf_counter() + duration
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as session:

        async def worker() -> None:
            nonlocal completed
            while time.perf_counter() < deadline:
                sent = time.perf_counter()
                last = None
                async with session.post(url + "/v1/chat/completions", json=body) as r:
                    async for line in r.content:
                        if not line.startswith(b"data: {") or b'"content":"' not in line:
                            continue
                        if b'"role"' in line:
                            continue
                        now = time.perf_counter()
                        if last is None:
                            ttft.append(now - sent)
                        else:
                            itl.append(now - last)
                        last = now
                completed += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {
        "requests": completed,
        "ttft_p50_ms": percentile(ttft, 0.5) * 1e3,
        "ttft_p99_ms": percentile(ttft, 0.99) * 1e3,
        "itl_p50_ms": percentile(itl, 0.5) * 1e3,
        "itl_p99_ms": percentile(itl, 0.99) * 1e3,
        "chunks_per_request": (len(itl) + len(ttft)) / max(1, completed),
    }


def measure(server: BenchServer, concurrency: int, duration: float, tokens: int) -> dict[str, Any]:
    engines = server.engine_processes()
    front0, engines0, t0 = cpu_seconds([server.front]), cpu_seconds(engines), time.perf_counter()
    wrk = run_wrk(server.url, concurrency, duration, tokens)
    wall = time.perf_counter() - t0
    front_cpu = cpu_seconds([server.front]) - front0
    engine_cpu = cpu_seconds(engines) - engines0
    delivered = wrk["requests"] * tokens
    latency = asyncio.run(latency_client(server.url, concurrency, min(duration, 3.0), tokens))
    return {
        "concurrency": concurrency,
        "tokens_per_request": tokens,
        "wrk_requests": wrk["requests"],
        "wrk_non_2xx": wrk["non_2xx"],
        "tokens_per_s": delivered / wall,
        "front_cpu_us_per_token": front_cpu / delivered * 1e6 if delivered else None,
        "engine_cpu_us_per_token": engine_cpu / delivered * 1e6 if delivered else None,
        "front_cpu_util": front_cpu / wall,
        **{k: v for k, v in latency.items() if k != "requests"},
        "latency_client_requests": latency["requests"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", default="1,16,64,256")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument(
        "--tokens-per-second",
        type=float,
        default=0,
        help="per-stream pace of the fake model; 0 = full speed (deltas merge into few events)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "relay.json")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("bench/relay.py needs wrk (apt-get install wrk)", file=sys.stderr)
        return 2
    levels = [int(c) for c in args.concurrency.split(",")]
    slots = max(levels) // args.engines + 1
    options = {"output_tokens": 1_000_000, "tokens_per_second": args.tokens_per_second}
    model = {"id": "fast", "format": "fake", "options": options}
    server = BenchServer(
        {"max_parallel_requests": slots, "max_queue": 10_000}, [model], args.engines
    )
    try:
        rows = [measure(server, c, args.duration, args.tokens) for c in levels]
    finally:
        server.stop()
    result = {
        "benchmark": "relay",
        "engines": args.engines,
        "tokens_per_second_per_stream": args.tokens_per_second,
        "duration_s": args.duration,
        "machine_cpus": _cpus(),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(_table(rows))
    return 0


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("streams", "tok/s", "front µs/tok", "engine µs/tok", "TTFT p50/p99 ms",
            "ITL p50/p99 ms", "chunks/req")  # fmt: skip
    lines = [" | ".join(head)]
    for r in rows:
        lines.append(
            f"{r['concurrency']} | {r['tokens_per_s']:,.0f} | {r['front_cpu_us_per_token']:.2f} | "
            f"{r['engine_cpu_us_per_token']:.2f} | {r['ttft_p50_ms']:.2f}/{r['ttft_p99_ms']:.2f} | "
            f"{r['itl_p50_ms']:.3f}/{r['itl_p99_ms']:.3f} | {r['chunks_per_request']:.1f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
