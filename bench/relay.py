"""Relay benchmark: fake engines at full speed, N concurrent streams, three designs in one
run: CoderAI (ZeroMQ bus), the seed's HTTP reverse proxy, and the bare handler.

Throughput is measured with wrk (a C load generator that is not the bottleneck), latency
(TTFT, inter-chunk gaps) with an asyncio client, and each relaying process's CPU time per
delivered token from its own rusage.

    python bench/relay.py [--designs coderai,proxy,bare] [--concurrency 1,16,64,256,1024]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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

from bench.designs import Running, start_bare, start_coderai, start_proxy
from bench.server import cpu_seconds

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
    url: str, concurrency: int, duration: float, tokens: int, max_requests: int = 0
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
                if max_requests and completed >= max_requests:
                    return
                sent = time.perf_counter()
                last = None
                async with session.post(url + "/v1/chat/completions", json=body) as r:
                    async for line in r.content:
                        # content chunks only: not the role opening, not the final empty delta
                        if not line.startswith(b"data: {") or b'"content"' not in line:
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


def measure(design: Running, concurrency: int, duration: float, tokens: int) -> dict[str, Any]:
    front0 = cpu_seconds([design.front])
    workers0 = cpu_seconds(design.workers)
    t0 = time.perf_counter()
    wrk = run_wrk(design.url, concurrency, duration, tokens)
    wall = time.perf_counter() - t0
    front_cpu = cpu_seconds([design.front]) - front0
    worker_cpu = cpu_seconds(design.workers) - workers0
    delivered = wrk["requests"] * tokens
    # the Python client is itself the bottleneck at high concurrency: latency is sampled
    # with at most 64 streams
    latency_streams = min(concurrency, 64)
    latency = asyncio.run(latency_client(design.url, latency_streams, min(duration, 3.0), tokens))
    per_token = 1e6 / delivered if delivered else float("nan")
    return {
        "design": design.name,
        "concurrency": concurrency,
        "tokens_per_request": tokens,
        "wrk_requests": wrk["requests"],
        "wrk_non_2xx": wrk["non_2xx"],
        "tokens_per_s": delivered / wall,
        "front_cpu_us_per_token": front_cpu * per_token,
        "total_cpu_us_per_token": (front_cpu + worker_cpu) * per_token,
        "front_cpu_util": front_cpu / wall,
        "latency_streams": latency_streams,
        **{k: v for k, v in latency.items() if k != "requests"},
        "latency_client_requests": latency["requests"],
    }


def single_stream_ttft(design: Running, requests: int = 300) -> dict[str, float]:
    """TTFT of one stream at a time with one token: the latency a design adds."""
    stats = asyncio.run(latency_client(design.url, 1, 60.0, 1, max_requests=requests))
    return {"ttft_p50_ms": stats["ttft_p50_ms"], "ttft_p99_ms": stats["ttft_p99_ms"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--designs", default="coderai,proxy,bare")
    parser.add_argument("--concurrency", default="1,16,64,256,1024")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument(
        "--tokens-per-second",
        type=float,
        default=0,
        help="per-stream pace of CoderAI's fake model (0 = full speed); baselines cannot pace",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "relay.json")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("bench/relay.py needs wrk (apt-get install wrk)", file=sys.stderr)
        return 2
    levels = [int(c) for c in args.concurrency.split(",")]
    designs = args.designs.split(",")
    if args.tokens_per_second:
        designs = ["coderai"]
    starters = {
        "coderai": lambda: start_coderai(
            args.engines, max(levels) // args.engines + 1, args.tokens_per_second
        ),
        "proxy": lambda: start_proxy(args.engines),
        "bare": start_bare,
    }
    rows: list[dict[str, Any]] = []
    single: dict[str, dict[str, float]] = {}
    for name in designs:
        design = starters[name]()
        try:
            single[name] = single_stream_ttft(design)
            rows.extend(measure(design, c, args.duration, args.tokens) for c in levels)
        finally:
            design.stop()
    result = {
        "benchmark": "relay",
        "engines": args.engines,
        "tokens_per_second_per_stream": args.tokens_per_second,
        "duration_s": args.duration,
        "machine_cpus": os.cpu_count(),
        "single_stream_ttft": single,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(_table(rows))
    for name, ttft in single.items():
        print(f"{name}: one stream, one token: TTFT p50 {ttft['ttft_p50_ms']:.2f} ms, "
              f"p99 {ttft['ttft_p99_ms']:.2f} ms")  # fmt: skip
    return 0


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("design", "streams", "tok/s", "front µs/tok", "all µs/tok", "TTFT p50/p99 ms",
            "ITL p50/p99 ms", "chunks/req")  # fmt: skip
    lines = [" | ".join(head)]
    for r in rows:
        lines.append(
            f"{r['design']} | {r['concurrency']} | {r['tokens_per_s']:,.0f} | "
            f"{r['front_cpu_us_per_token']:.2f} | {r['total_cpu_us_per_token']:.2f} | "
            f"{r['ttft_p50_ms']:.2f}/{r['ttft_p99_ms']:.2f} | "
            f"{r['itl_p50_ms']:.3f}/{r['itl_p99_ms']:.3f} | {r['chunks_per_request']:.1f}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
