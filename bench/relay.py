"""Relay benchmark: N concurrent streams through each design in one run, every design's
engines paced at the same per-stream rate so that each token is its own event everywhere:
CoderAI (ZeroMQ bus), an HTTP reverse proxy (the original design), the bare aiohttp handler, and the
floor (a bare asyncio server writing pre-rendered events at that pace, on asyncio's loop
and on uvloop: what one write per event costs in Python here).

For each rate, level and design, wrk (a C load generator) holds all but a few of the
streams while an asyncio client holds the rest and times them (TTFT, the gaps between
content events): both run at once, so the latency is the latency under that load.
Events delivered are counted from the bytes wrk read (partial answers count too) and the
latency client's own count; each relaying process's CPU time per event comes from its
rusage. A rate of 0 is full speed, where CoderAI merges a stream's deltas into few events.

    python -m bench.relay [--designs coderai,proxy,floor,floor-uvloop] [--rates 50,200,1000]
                          [--concurrency 64,256,1024]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.designs import Running, start_bare, start_coderai, start_floor, start_proxy
from bench.lib.server import cpu_seconds
from bench.lib.stats import percentile
from tests.support.sse import DATA, is_content_delta

RESULTS = Path(__file__).resolve().parent / "results"


def request_body(tokens: int) -> dict[str, Any]:
    return {
        "model": "fast",
        "stream": True,
        "max_tokens": tokens,
        "messages": [{"role": "user", "content": "benchmark"}],
    }


_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}


def start_wrk(url: str, concurrency: int, duration: float, tokens: int) -> subprocess.Popen[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as lua:
        lua.write(
            'wrk.method = "POST"\n'
            'wrk.headers["Content-Type"] = "application/json"\n'
            f"wrk.body = [[{json.dumps(request_body(tokens))}]]\n"
        )
    threads = max(1, min(2, concurrency))
    cmd = ["wrk", f"-t{threads}", f"-c{concurrency}", f"-d{int(duration)}s", "-s", lua.name,
           "--timeout", "60s", url + "/v1/chat/completions"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def wrk_result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """Complete streamed requests and bytes read, as wrk counts them."""
    out, _ = proc.communicate()
    done = re.search(r"(\d+) requests in [\d.]+\w+, ([\d.]+)(\w+) read", out)
    assert done is not None, out
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    return {
        "requests": int(done.group(1)),
        "bytes": float(done.group(2)) * _UNITS[done.group(3)],
        "non_2xx": int(errors.group(1)) if errors else 0,
        "socket_errors": socket_errors.group(1) if socket_errors else "",
    }


def one_answer(url: str, tokens: int) -> tuple[int, int]:
    """(bytes on the wire, events) of one whole answer, headers and framing included: how
    wrk's bytes read turn into events delivered."""
    body = json.dumps(request_body(tokens)).encode()
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    return len(raw), raw.count(DATA)


async def latency_client(
    url: str, concurrency: int, duration: float, tokens: int, max_requests: int = 0
) -> dict[str, float]:
    """TTFT = request sent -> first content chunk; ITL = gaps between content chunks."""
    ttft: list[float] = []
    itl: list[float] = []
    completed = 0
    seen = 0  # events received, finished answers or not
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
                        nonlocal seen
                        if not line.startswith(DATA):
                            continue
                        seen += 1
                        # content chunks only: not the role opening, not the final empty delta
                        if not is_content_delta(line):
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
        "events": seen,
    }


def measure(
    design: Running, concurrency: int, duration: float, tokens: int, per_answer: tuple[int, int]
) -> dict[str, Any]:
    answer_bytes, answer_events = per_answer
    # a few streams are timed by the Python client; wrk holds the rest, at the same time
    timed = max(1, min(32, concurrency // 8))
    front0 = cpu_seconds([design.front])
    workers0 = cpu_seconds(design.workers)
    t0 = time.perf_counter()
    wrk = (
        start_wrk(design.url, concurrency - timed, duration, tokens)
        if concurrency > timed
        else None
    )
    latency = asyncio.run(latency_client(design.url, timed, duration, tokens))
    loaded = wrk_result(wrk) if wrk is not None else {"requests": 0, "bytes": 0.0, "non_2xx": 0}
    wall = time.perf_counter() - t0
    front_cpu = cpu_seconds([design.front]) - front0
    worker_cpu = cpu_seconds(design.workers) - workers0
    events = loaded["bytes"] * answer_events / answer_bytes + latency["events"]
    per_event = 1e6 / events if events else float("nan")
    return {
        "design": design.name,
        "concurrency": concurrency,
        "tokens_per_request": tokens,
        "events_per_request": answer_events,
        "wrk_requests": loaded["requests"],
        "wrk_non_2xx": loaded["non_2xx"],
        "events": events,
        "events_per_s": events / wall,
        "front_cpu_us_per_event": front_cpu * per_event,
        "total_cpu_us_per_event": (front_cpu + worker_cpu) * per_event,
        "front_cpu_util": front_cpu / wall,
        "latency_streams": timed,
        **{k: v for k, v in latency.items() if k not in ("requests", "events")},
        "latency_client_requests": latency["requests"],
    }


def single_stream_ttft(design: Running, requests: int = 300) -> dict[str, float]:
    """TTFT of one stream at a time with one token: the latency a design adds."""
    stats = asyncio.run(latency_client(design.url, 1, 60.0, 1, max_requests=requests))
    return {"ttft_p50_ms": stats["ttft_p50_ms"], "ttft_p99_ms": stats["ttft_p99_ms"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--designs", default="coderai,proxy,floor,floor-uvloop")
    parser.add_argument("--rates", default="50,200,1000",
                        help="tokens/s per stream, every design alike (0: full speed)")  # fmt: skip
    parser.add_argument("--concurrency", default="64,256,1024")
    parser.add_argument("--duration", type=float, default=5.0,
                        help="seconds per level, at least 4 answers' time at the rate")  # fmt: skip
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=RESULTS / "relay-paced.json")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("bench/relay.py needs wrk (apt-get install wrk)", file=sys.stderr)
        return 2
    levels = [int(c) for c in args.concurrency.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    designs = args.designs.split(",")
    rows: list[dict[str, Any]] = []
    single: dict[str, dict[str, float]] = {}
    for rate in rates:
        # every engine can take every stream: a model's owner engine takes its requests
        # while it has credit, and none waits in the front's queue
        starters = _starters(args.engines, max(levels) + 1, rate)
        # long enough that the answers cut at the end are a small part of what is counted
        duration = max(args.duration, 4 * args.tokens / rate) if rate else args.duration
        for name in designs:
            design = starters[name]()
            try:
                if name not in single:  # one stream, one token: the latency a design adds
                    single[name] = single_stream_ttft(design)
                per_answer = one_answer(design.url, args.tokens)
                for level in levels:
                    row = measure(design, level, duration, args.tokens, per_answer)
                    rows.append({"rate": rate, **row})
                    print(_table([rows[-1]], head=False), flush=True)
            finally:
                design.stop()
    result = {
        "benchmark": "relay, every design paced alike",
        "engines": args.engines,
        "machine_cpus": os.cpu_count(),
        "single_stream_ttft": single,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(_table(rows))
    print(_ratios(rows))
    for name, ttft in single.items():
        print(f"{name}: one stream, one token: TTFT p50 {ttft['ttft_p50_ms']:.2f} ms, "
              f"p99 {ttft['ttft_p99_ms']:.2f} ms")  # fmt: skip
    return 0


def _starters(engines: int, slots: int, rate: float) -> dict[str, Callable[[], Running]]:
    return {
        "coderai": lambda: start_coderai(engines, slots, rate),
        "proxy": lambda: start_proxy(engines, rate),
        "bare": lambda: start_bare(rate),
        "floor": lambda: start_floor(rate),
        "floor-uvloop": lambda: start_floor(rate, uvloop=True),
    }


def _ratio(ours: dict[str, Any], other: dict[str, Any] | None, key: str) -> str:
    return f"{ours[key] / other[key]:.2f}" if other and other[key] else "-"


def _ratios(rows: list[dict[str, Any]]) -> str:
    """CoderAI's front CPU per event against the proxy's and the floor's, and its events
    per second against the proxy's, level by level."""
    by = {(r["rate"], r["concurrency"], r["design"]): r for r in rows}
    lines = ["rate | streams | front µs/event, coderai/proxy | coderai/floor"
             " | events/s, coderai/proxy"]  # fmt: skip
    for rate, level, design in by:
        if design != "coderai":
            continue
        ours = by[(rate, level, "coderai")]
        proxy, floor = by.get((rate, level, "proxy")), by.get((rate, level, "floor"))
        cpu, rate_of = "front_cpu_us_per_event", "events_per_s"
        lines.append(f"{rate:g} | {level} | {_ratio(ours, proxy, cpu)} | "
                     f"{_ratio(ours, floor, cpu)} | {_ratio(ours, proxy, rate_of)}")  # fmt: skip
    return "\n".join(lines)


def _table(rows: list[dict[str, Any]], head: bool = True) -> str:
    titles = ("rate", "design", "streams", "events/s", "front µs/event", "all µs/event",
              "TTFT p50/p99 ms", "ITL p50/p99 ms", "events/answer")  # fmt: skip
    lines = [" | ".join(titles)] if head else []
    for r in rows:
        lines.append(
            f"{r['rate']:g} | {r['design']} | {r['concurrency']} | {r['events_per_s']:,.0f} | "
            f"{r['front_cpu_us_per_event']:.2f} | {r['total_cpu_us_per_event']:.2f} | "
            f"{r['ttft_p50_ms']:.2f}/{r['ttft_p99_ms']:.2f} | "
            f"{r['itl_p50_ms']:.3f}/{r['itl_p99_ms']:.3f} | {r['events_per_request']}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
