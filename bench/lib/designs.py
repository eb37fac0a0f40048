"""The designs the relay benchmark runs side by side, each started as real processes:
CoderAI (front + engines over the bus), an HTTP reverse proxy (the original design: front
+ engines on internal ports), the bare handler (one aiohttp process writing the SSE itself), and the
floor (a bare asyncio server writing pre-rendered events, on asyncio's loop or uvloop).
Each paces its streams at the same rate when asked to (0: full speed)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.lib.server import BenchServer, free_port

#: the repository's root: the baselines run as modules of bench.baselines from there
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Running:
    name: str
    url: str
    #: the process that relays (CoderAI's front, the proxy) or does everything (bare)
    front: psutil.Process
    workers: list[psutil.Process] = field(default_factory=list)
    _stop: Any = None

    def stop(self) -> None:
        self._stop()


def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


def _paced(tokens_per_second: float) -> list[str]:
    return ["--tokens-per-second", str(tokens_per_second)] if tokens_per_second else []


def _spawn(baseline: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", f"bench.baselines.{baseline}", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(10)


def start_coderai(engines: int, slots: int, tokens_per_second: float = 0) -> Running:
    options = {"output_tokens": 1_000_000, "tokens_per_second": tokens_per_second}
    server = BenchServer(
        {"max_parallel_requests": slots, "max_queue": 100_000},
        [{"id": "fast", "format": "fake", "options": options}],
        engines,
    )
    return Running("coderai", server.url, server.front, server.engine_processes(), server.stop)


def start_proxy(engines: int, tokens_per_second: float = 0) -> Running:
    ports = [free_port() for _ in range(engines)]
    workers = [_spawn("sse_engine", "--port", str(p), *_paced(tokens_per_second))
               for p in ports]  # fmt: skip
    for port in ports:
        _wait_port(port)
    port = free_port()
    front = _spawn("proxy_front", "--port", str(port), "--engines", ",".join(map(str, ports)))
    _wait_port(port)
    return Running(
        "proxy",
        f"http://127.0.0.1:{port}",
        psutil.Process(front.pid),
        [psutil.Process(w.pid) for w in workers],
        lambda: _stop_all([front, *workers]),
    )


def start_bare(tokens_per_second: float = 0) -> Running:
    port = free_port()
    proc = _spawn("sse_engine", "--port", str(port), *_paced(tokens_per_second))
    _wait_port(port)
    return Running(
        "bare", f"http://127.0.0.1:{port}", psutil.Process(proc.pid), [], lambda: _stop_all([proc])
    )


def start_floor(tokens_per_second: float = 0, uvloop: bool = False) -> Running:
    port = free_port()
    proc = _spawn("floor", "--port", str(port), *_paced(tokens_per_second),
                  *(["--uvloop"] if uvloop else []))  # fmt: skip
    _wait_port(port)
    name = "floor-uvloop" if uvloop else "floor"
    return Running(
        name, f"http://127.0.0.1:{port}", psutil.Process(proc.pid), [], lambda: _stop_all([proc])
    )
