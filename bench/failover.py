"""Failover: how fast a client learns that its engine died, and how fast the engine is
back, for SIGKILL (crash) and SIGSTOP (hang), over several trials.

    python -m bench.failover [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.lib.server import BenchServer
from coderai.front.engines.supervisor import STARTUP_FAILURE_SECONDS
from tests.support.sse import iter_frames

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = {"id": "slow", "format": "fake",
         "options": {"tokens_per_second": 20, "output_tokens": 1_000_000}}  # fmt: skip


def engine_pid(server: BenchServer) -> int | None:
    engines = server.health()["engines"]
    return int(engines[0]["pid"]) if engines and "pid" in engines[0] else None


def trial(server: BenchServer, sig: signal.Signals) -> dict[str, float]:
    pid = engine_pid(server)
    assert pid is not None
    # an engine that dies within 10 s of its start counts towards back-off: let each
    # trial's engine outlive that, so every trial measures a first failure
    time.sleep(STARTUP_FAILURE_SECONDS + 0.5)
    first = threading.Event()
    ended: list[float] = []

    def stream() -> None:
        body = json.dumps({"model": "slow", "prompt": "x", "stream": True}).encode()
        request = urllib.request.Request(server.url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as r:
            for frame in iter_frames(r):
                if frame.comment is None:
                    first.set()
        ended.append(time.monotonic())

    reader = threading.Thread(target=stream)
    reader.start()
    assert first.wait(10)
    killed = time.monotonic()
    os.kill(pid, sig)
    reader.join(60)
    while engine_pid(server) in (None, pid):
        time.sleep(0.02)
    back = time.monotonic()
    return {"client_error_s": ended[0] - killed, "engine_back_s": back - killed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "failover.json")
    args = parser.parse_args()
    config = {"heartbeat_interval": 0.5, "heartbeat_liveness": 4}
    result: dict[str, Any] = {"benchmark": "failover", "heartbeat": config}
    server = BenchServer(config, [MODEL], engines=1)
    try:
        for sig in (signal.SIGKILL, signal.SIGSTOP):
            trials = [trial(server, sig) for _ in range(args.trials)]
            result[str(sig.name)] = {
                "trials": trials,
                "client_error_median_s": statistics.median(t["client_error_s"] for t in trials),
                "engine_back_median_s": statistics.median(t["engine_back_s"] for t in trials),
            }
            time.sleep(1)
    finally:
        server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name in ("SIGKILL", "SIGSTOP"):
        r = result[name]
        print(f"{name}: client error after {r['client_error_median_s']:.2f} s, "
              f"engine back after {r['engine_back_median_s']:.2f} s (medians)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
