"""The fleet's host-RAM cap, step by step: three engines under a cap that holds two fake
models (each really allocates and touches its memory), one of them generating throughout.
For each step, the fleet's RSS by process once it has settled, the peak sampled every
20 ms while the step ran, and how long the request waited for its room.

    python -m bench.ram_cap [--model-mb 300]

Writes bench/results/ram_cap.json and prints a table. What it does not show: real models
(a torch or llama.cpp model frees memory less promptly than a bytearray), and more than
one load waiting at once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.lib.server import BenchServer
from tests.support.sse import DONE, event

RESULTS = Path(__file__).resolve().parent / "results"
KEY = "bench-admin-key"
MIB = 1 << 20
NAMES = ("a", "b", "c")


def fleet(srv: BenchServer) -> dict[str, int]:
    """RSS by process: the front and each engine (by its --name), children included."""
    front = psutil.Process(srv.proc.pid)
    out = {"front": front.memory_info().rss}
    for child in front.children():
        argv = child.cmdline()
        name = argv[argv.index("--name") + 1] if "--name" in argv else "other"
        total = child.memory_info().rss
        total += sum(p.memory_info().rss for p in child.children(recursive=True))
        out[name] = out.get(name, 0) + total
    return out


class Sampler:
    """The fleet's total RSS every 20 ms on its own thread; the peak since reset()."""

    def __init__(self, srv: BenchServer) -> None:
        self.srv, self.peak, self._stop = srv, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            # a process may end between the listing and the reading
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, sum(fleet(self.srv).values()))

    def reset(self) -> None:
        self.peak = sum(fleet(self.srv).values())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def loaded(srv: BenchServer) -> dict[str, list[str]]:
    return {e["name"]: sorted(e["loaded_models"]) for e in srv.health()["engines"]}


def settle(srv: BenchServer, expected: dict[str, list[str]], cap: int) -> None:
    deadline = time.monotonic() + 60
    while loaded(srv) != expected or sum(fleet(srv).values()) > cap:
        if time.monotonic() > deadline:
            raise RuntimeError(f"did not settle: {loaded(srv)} against {expected}")
        time.sleep(0.05)


def chat(srv: BenchServer, model: str) -> float:
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
    start = time.monotonic()
    answer = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=120)
    answer.raise_for_status()
    return time.monotonic() - start


class Stream:
    """A long streamed answer: every event it read, and how it ended."""

    def __init__(self, srv: BenchServer, model: str, tokens: int) -> None:
        self.events = 0
        self.finish: str | None = None
        body = {"model": model, "stream": True, "max_tokens": tokens,
                "messages": [{"role": "user", "content": "x"}]}  # fmt: skip
        self._thread = threading.Thread(target=self._read, args=(srv, body), daemon=True)
        self._thread.start()

    def _read(self, srv: BenchServer, body: dict[str, Any]) -> None:
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=300) as r:
            for line in r.iter_lines():
                chunk = event(line)
                if chunk is None or chunk is DONE:
                    continue
                self.events += 1
                choice = chunk["choices"]
                if choice and choice[0].get("finish_reason"):
                    self.finish = choice[0]["finish_reason"]

    def join(self) -> None:
        self._thread.join(timeout=300)


def run(model_mb: int) -> dict[str, Any]:
    engines = [{"name": n, "backend": "cpu", "capabilities": ["fake"]} for n in NAMES]
    options = {"memory_mb": model_mb}
    slow = {**options, "tokens_per_second": 50, "output_tokens": 100_000}
    models = [{"id": f"on-{n}", "format": "fake", "engine": n, "options": options}
              for n in NAMES] + [
        {"id": "gen-b", "format": "fake", "engine": "b", "options": slow}]  # fmt: skip
    srv = BenchServer({"engine_specs": engines, "heartbeat_interval": 0.5,
                       "queue_timeout": 60}, models, 3,
                      extra={"auth": {"admin_key": KEY}})  # fmt: skip
    sampler = Sampler(srv)
    steps: list[dict[str, Any]] = []
    try:
        time.sleep(1)  # the engines' start-up allocations are done
        cap = sum(fleet(srv).values()) + int(2.5 * model_mb * MIB)
        answer = httpx.patch(srv.url + "/admin/api/settings",
                             json={"offload.max_ram_gb": cap / (1 << 30)},
                             headers={"Authorization": f"Bearer {KEY}"}, timeout=10)  # fmt: skip
        answer.raise_for_status()

        def step(label: str, action: Any, expected: dict[str, list[str]]) -> None:
            sampler.reset()
            waited = action()
            settle(srv, expected, cap)
            usage = fleet(srv)
            steps.append({"step": label, "waited_s": waited, "loaded": loaded(srv),
                          "rss_mb": {k: v / MIB for k, v in usage.items()},
                          "total_mb": sum(usage.values()) / MIB,
                          "peak_mb": sampler.peak / MIB, "cap_mb": cap / MIB})  # fmt: skip

        empty: dict[str, list[str]] = {n: [] for n in NAMES}
        step("idle fleet", lambda: None, empty)
        step("load on-a", lambda: chat(srv, "on-a"), {**empty, "a": ["on-a"]})
        stream: Stream | None = None

        def start_stream() -> float:
            nonlocal stream
            start = time.monotonic()
            stream = Stream(srv, "gen-b", 3000)
            while stream.events < 3:
                time.sleep(0.01)
            return time.monotonic() - start

        step("gen-b streams on b", start_stream, {**empty, "a": ["on-a"], "b": ["gen-b"]})
        step("load on-c (a's idle on-a goes)", lambda: chat(srv, "on-c"),
             {**empty, "b": ["gen-b"], "c": ["on-c"]})  # fmt: skip
        step("load on-a (c's idle on-c goes)", lambda: chat(srv, "on-a"),
             {**empty, "a": ["on-a"], "b": ["gen-b"]})  # fmt: skip
        assert stream is not None
        stream.join()
        events, finish = stream.events, stream.finish
    finally:
        sampler.stop()
        srv.stop()
    return {"model_mb": model_mb, "steps": steps,
            "stream": {"events": events, "finish_reason": finish}}  # fmt: skip


def table(result: dict[str, Any]) -> str:
    rows = ["| step | loaded (a / b / c) | front | a | b | c | fleet | peak | cap | waited |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]  # fmt: skip
    for s in result["steps"]:
        held = " / ".join(",".join(s["loaded"][n]) or "-" for n in NAMES)
        rss = s["rss_mb"]
        waited = "" if s["waited_s"] is None else f"{s['waited_s']:.2f} s"
        rows.append(
            f"| {s['step']} | {held} | {rss['front']:.0f} | {rss.get('a', 0):.0f} | "
            f"{rss.get('b', 0):.0f} | {rss.get('c', 0):.0f} | {s['total_mb']:.0f} | "
            f"{s['peak_mb']:.0f} | {s['cap_mb']:.0f} | {waited} |"
        )
    stream = result["stream"]
    rows.append(f"\nMiB. gen-b's stream: {stream['events']} events, "
                f"finish_reason {stream['finish_reason']!r}.")  # fmt: skip
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-mb", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS / "ram_cap.json")
    args = parser.parse_args()
    result = run(args.model_mb)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
