"""Front memory while clients read a fast stream slowly.

N clients each open a stream from a full-speed fake engine and read about 1 KB/s through a
4 KiB receive window. The front's RSS is sampled every 0.25 s; the figure is its growth
over the idle baseline, with the stream backlog cap given (or the code's default).
Run it on two checkouts (PYTHONPATH=...) to compare before and after a change.

    python -m bench.slow_readers --streams 4 --seconds 20 [--backlog 65536]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time
from typing import Any

from bench.lib.server import BenchServer

FAST = {"id": "fast", "format": "fake", "options": {"output_tokens": 10_000_000}}


def _open(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    body = json.dumps({"model": "fast", "prompt": "p", "max_tokens": 10_000_000,
                       "stream": True}).encode()  # fmt: skip
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body))  # fmt: skip
    return sock


def measure(streams: int, seconds: float, backlog: int | None) -> dict[str, Any]:
    server: dict[str, Any] = {"max_parallel_requests": streams}
    if backlog is not None:
        server["stream_backlog_chars"] = backlog
    srv = BenchServer(server, [FAST], engines=1)
    try:
        time.sleep(1)
        baseline = srv.front.memory_info().rss
        socks = [_open(srv.port) for _ in range(streams)]
        samples: list[int] = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for sock in socks:
                sock.recv(250)
            samples.append(srv.front.memory_info().rss - baseline)
            time.sleep(0.25)
        for sock in socks:
            sock.close()
        time.sleep(2)
        after_close = srv.front.memory_info().rss - baseline
    finally:
        srv.stop()
    mib = 2**20
    return {
        "streams": streams,
        "seconds": seconds,
        "backlog_chars": backlog,
        "baseline_mib": round(baseline / mib, 1),
        "growth_peak_mib": round(max(samples) / mib, 1),
        "growth_median_mib": round(statistics.median(samples) / mib, 1),
        "growth_last_mib": round(samples[-1] / mib, 1),
        "growth_after_close_mib": round(after_close / mib, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--backlog", type=int, default=None)
    args = parser.parse_args()
    print(json.dumps(measure(args.streams, args.seconds, args.backlog)))


if __name__ == "__main__":
    main()
