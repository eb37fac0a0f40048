"""Chaos soak: mixed load from another process (bench/soak_load.py) for N minutes while a
chaos thread SIGKILLs and SIGSTOPs engines, restarts one through the admin API and reloads
the catalogue. Every request is accounted for (see soak_load.py for the outcomes); then
the invariants are checked: no leaked slot, no queued job, no orphan process, the front's
RSS within RSS_BOUND_MB of where it started, and log lines per second bounded.

    python -m bench.soak [--minutes 10] [--clients 12] [--seed 1]

Writes bench/results/soak.json; exits 1 when a request went wrong or an invariant broke.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from bench.lib.results import RESULTS
from bench.lib.server import BenchServer
from bench.lib.stats import percentile
from bench.soak_load import (
    CHAT,
    EMBED,
    EMBEDDING_DIMS,
    TOOL_SCRIPT,
    TOOLS,
    WIDE,
    WIDE_TOKEN_CHARS,
    WIDE_TOKENS,
)
from coderai.front.engines.supervisor import STARTUP_FAILURE_SECONDS

#: the repository's root: the load runs as the module bench.soak_load from there
REPO = Path(__file__).resolve().parents[1]
KEY = "soak-admin-key"
ENGINES = 3
HEARTBEAT_INTERVAL = 0.5
LIVENESS = 4
#: what the front's RSS may grow by over the run
RSS_BOUND_MB = 64
#: the most log lines the server may write in any one second
LOG_LINES_PER_SECOND = 200
#: seconds between chaos actions (drawn uniformly)
CHAOS_GAP = (2.0, 6.0)
ACTIONS = ["kill", "stop", "restart", "catalogue"]
#: what fine outcomes are; anything else is a defect
FINE = {"completed", "cancelled", "error", "refused"}
#: the share of each kind that must end as meant, errors aside: chaos explains a few
#: errors, not many (a server answering every chat with 503 would otherwise pass)
MOSTLY = 0.9
#: how each kind ends when all goes well
MEANT = {"disconnect": {"cancelled", "completed"}, "bad_body": {"refused"}}
MODELS: list[dict[str, Any]] = [
    {"id": CHAT, "format": "fake", "options": {"tokens_per_second": 200}},
    {"id": EMBED, "format": "fake", "options": {"embedding_dims": EMBEDDING_DIMS}},
    {"id": TOOLS, "format": "fake", "options": {"script": TOOL_SCRIPT, "tool_format": "hermes"}},
    {"id": WIDE, "format": "fake",
     "options": {"token_chars": WIDE_TOKEN_CHARS, "output_tokens": 2 * WIDE_TOKENS}},
]  # fmt: skip
#: a model the chaos adds to the catalogue and takes away again
SPARE = {"id": "spare", "format": "fake"}


def _admin(server: BenchServer, method: str, path: str, body: object = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + "/admin/api/" + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {KEY}",
                                              "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


class Chaos(threading.Thread):
    """Every few seconds one of: SIGKILL an engine, SIGSTOP one (for less or more than
    its liveness), restart one through the admin API, replace the catalogue."""

    def __init__(self, server: BenchServer, rng: random.Random) -> None:
        super().__init__(daemon=True)
        self.server, self.rng = server, rng
        self.stop = threading.Event()
        self.actions: list[dict[str, Any]] = []
        self._spare = False

    def _engines(self) -> list[dict[str, Any]]:
        return [e for e in self.server.health()["engines"] if "pid" in e]

    def _victim(self) -> dict[str, Any] | None:
        """An engine that has lived past start-up (a kill sooner counts towards back-off,
        which would only make the fleet smaller for longer)."""
        old = []
        for engine in self._engines():
            try:
                lived = time.time() - psutil.Process(engine["pid"]).create_time()
            except psutil.NoSuchProcess:
                continue
            if lived > STARTUP_FAILURE_SECONDS:
                old.append(engine)
        return self.rng.choice(old) if old else None

    def run(self) -> None:
        # rounds of every action once, in a fresh order each round: a short run still
        # does each of them
        order: list[str] = []
        while not self.stop.wait(self.rng.uniform(*CHAOS_GAP)):
            if not order:
                order = self.rng.sample(ACTIONS, len(ACTIONS))
            action = order.pop()
            record: dict[str, Any] = {"at": time.monotonic(), "action": action}
            try:
                self._do(action, record)
            except OSError as exc:  # the front unreachable, or an engine gone meanwhile
                record["error"] = repr(exc)
            self.actions.append(record)

    def undone(self) -> list[dict[str, Any]]:
        """Actions that did not take effect: an admin call answered otherwise than 200, or
        not answered. A chaos that silently did nothing would flatter the run."""
        return [a for a in self.actions if "error" in a or a.get("status", 200) != 200]

    def _do(self, action: str, record: dict[str, Any]) -> None:
        if action == "catalogue":
            self._spare = not self._spare
            models = [*MODELS, SPARE] if self._spare else MODELS
            record["status"] = _admin(self.server, "PUT", "models", {"models": models})
            return
        victim = self._victim()
        if victim is None:
            record["skipped"] = "no engine past start-up"
            return
        record["engine"], pid = victim["name"], int(victim["pid"])
        if action == "kill":
            self._signal(record, pid, signal.SIGKILL)
        elif action == "stop":
            # half the time back before the front gives up on it, half the time not
            silence = HEARTBEAT_INTERVAL * LIVENESS
            held = self.rng.choice([0.5, 1.5 * silence]) * self.rng.uniform(0.8, 1.2)
            record["seconds"] = held
            if self._signal(record, pid, signal.SIGSTOP):
                time.sleep(held)
                # the front kills an engine silent for too long: then there is none to wake
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        else:
            record["status"] = _admin(self.server, "POST", f"engines/{victim['name']}/restart")

    @staticmethod
    def _signal(record: dict[str, Any], pid: int, sig: signal.Signals) -> bool:
        """Whether the signal was sent; an engine that exited since it was chosen (the
        front killed it, say) is a skipped action, not a failed one."""
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            record["skipped"] = "the engine exited before the signal"
            return False
        return True


class Sampler(threading.Thread):
    """The front's RSS, and every process under it, once a second."""

    def __init__(self, server: BenchServer) -> None:
        super().__init__(daemon=True)
        self.front = server.front
        self.stop = threading.Event()
        #: (seconds since the load began, MiB)
        self.rss: list[tuple[float, float]] = []
        self.t0 = time.monotonic()
        #: every process seen under the front, as (pid, start time): a pid alone may be
        #: reused by another process by the end
        self.children: set[tuple[int, float]] = set()

    def sample(self) -> None:
        self.rss.append((time.monotonic() - self.t0, self.front.memory_info().rss / 2**20))
        for child in self.front.children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                self.children.add((child.pid, child.create_time()))

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()


def _settled(server: BenchServer, limit: float) -> dict[str, Any]:
    """Wait until every engine has joined and nothing runs or waits; what /healthz said
    last (the leak check reads it)."""
    deadline = time.monotonic() + limit
    while True:
        health = server.health()
        joined = [e for e in health["engines"] if "pid" in e]
        idle = all(e["in_flight"] == 0 for e in health["engines"]) and health["queued"] == 0
        if (len(joined) == ENGINES and idle) or time.monotonic() > deadline:
            return health
        time.sleep(0.2)


STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def _log_rate(log: str) -> tuple[int, int]:
    """Lines in all, and the most log records stamped with one second (a record's
    continuation lines, a traceback's, carry no stamp of their own)."""
    lines = log.splitlines()
    per_second = collections.Counter(m.group() for line in lines if (m := STAMP.match(line)))
    return len(lines), max(per_second.values(), default=0)


def _orphans(processes: set[tuple[int, float]]) -> list[int]:
    """Processes seen under the front that still run (the same process: its pid and
    start time) after the server stopped."""
    alive = []
    for pid, started in processes:
        try:
            process = psutil.Process(pid)
            if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in results:
        by_kind[r["kind"]][r["outcome"]] += 1
    completed = [r for r in results if r["outcome"] == "completed"]
    latency: dict[str, dict[str, float]] = {}
    for kind in sorted({r["kind"] for r in completed}):
        seconds = [r["seconds"] for r in completed if r["kind"] == kind]
        latency[kind] = {"p50_ms": statistics.median(seconds) * 1e3,
                         "p99_ms": percentile(seconds, 0.99) * 1e3}  # fmt: skip
    answered = {
        kind: sum(n for o, n in counts.items() if o in MEANT.get(kind, {"completed"}))
        / sum(counts.values())
        for kind, counts in by_kind.items()
    }
    return {
        "requests": len(results),
        "outcomes": dict(collections.Counter(r["outcome"] for r in results)),
        "answered": answered,
        "by_kind": {k: dict(v) for k, v in sorted(by_kind.items())},
        "latency": latency,
        "defects": [r for r in results if r["outcome"] not in FINE][:50],
        "errors": dict(collections.Counter(f"{r['status']} {r['detail'][:90]}" for r in results
                                           if r["outcome"] == "error").most_common(12)),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    args = parser.parse_args()
    seconds = args.minutes * 60
    settings = {"heartbeat_interval": HEARTBEAT_INTERVAL, "heartbeat_liveness": LIVENESS,
                "max_parallel_requests": 8, "drain_grace_seconds": 2.0}  # fmt: skip
    server = BenchServer(settings, MODELS, ENGINES, extra={"auth": {"admin_key": KEY}})
    requests_file = server.dir / "requests.jsonl"
    chaos, sampler = Chaos(server, random.Random(args.seed)), Sampler(server)
    try:
        rss_start = server.front.memory_info().rss / 2**20
        started = time.time()
        command = [sys.executable, "-m", "bench.soak_load", server.url,
                   str(seconds), str(requests_file), "--clients", str(args.clients),
                   "--seed", str(args.seed)]  # fmt: skip
        load = subprocess.Popen(command, cwd=REPO)
        sampler.t0 = time.monotonic()
        sampler.start()
        chaos.start()
        try:
            load_code = load.wait(seconds + 180)
        except subprocess.TimeoutExpired:  # its own deadlines should have ended it
            load.kill()
            load_code = load.wait()
        chaos.stop.set()
        chaos.join()
        health = _settled(server, 60.0)
        sampler.stop.set()
        sampler.join()
        sampler.sample()  # the engines as they are at the end
        rss_end = server.front.memory_info().rss / 2**20
        restarts = sum(e["restarts"] for e in health["engines"])
    finally:
        server.stop()
    elapsed = time.time() - started
    lines, busiest = _log_rate(server.log())
    orphans = _orphans(sampler.children)
    results = [json.loads(line) for line in requests_file.read_text().splitlines()]
    summary = summarise(results)
    invariants = {
        "every request accounted for, none a defect": not summary["defects"] and load_code == 0,
        f"each kind of request at least {MOSTLY:.0%} answered in full (or left on purpose,"
        " or refused as a bad body)": all(
            share >= MOSTLY for share in summary["answered"].values()
        ),
        "every chaos action took effect (the admin API answered 200)": not chaos.undone(),
        "no leaked slot": all(e["in_flight"] == 0 for e in health["engines"]),
        "no queued job left": health["queued"] == 0,
        "every engine back": sum("pid" in e for e in health["engines"]) == ENGINES,
        "no orphan process": not orphans,
        f"front RSS grew by at most {RSS_BOUND_MB} MiB": rss_end - rss_start <= RSS_BOUND_MB,
        f"at most {LOG_LINES_PER_SECOND} log lines in any second": busiest <= LOG_LINES_PER_SECOND,
    }
    report = {
        "minutes": args.minutes, "clients": args.clients, "engines": ENGINES,
        "seconds": elapsed, **summary,
        "chaos": dict(collections.Counter(a["action"] for a in chaos.actions)),
        "chaos_skipped": sum("skipped" in a for a in chaos.actions),
        "chaos_log": chaos.actions, "restarts": restarts,
        "rss_mb": {"start": rss_start, "end": rss_end, "samples": sampler.rss},
        "log": {"lines": lines, "per_second_mean": lines / elapsed,
                "busiest_second": busiest},
        "orphans": orphans, "invariants": invariants,
    }  # fmt: skip
    for action in chaos.actions:
        action["at"] -= sampler.t0  # on the RSS samples' clock
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("requests", "outcomes", "chaos", "restarts",
                                             "latency", "invariants")}, indent=1))  # fmt: skip
    for defect in summary["defects"][:10]:
        print("DEFECT", defect)
    return 0 if all(invariants.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
