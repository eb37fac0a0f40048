"""Start and stop a real `coderai run` for benchmarks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BenchServer:
    def __init__(
        self,
        server: dict[str, Any],
        models: list[dict[str, Any]],
        engines: int,
        extra: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="coderai-bench-"))
        self.port = free_port()
        config = {"server": {"port": self.port, "engines": engines, **server}, **(extra or {})}
        (self.dir / "config.json").write_text(json.dumps(config))
        (self.dir / "models.json").write_text(json.dumps({"models": models}))
        self._log = open(self.dir / "server.log", "wb")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "CODERAI_LOG_LEVEL": "WARNING", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coderai", "run", "--config", str(self.dir / "config.json")],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait(engines)
        self.front = psutil.Process(self.proc.pid)

    def health(self) -> dict[str, Any]:
        """/healthz's body, which answers 503 while no engine serves."""
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=5) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
        body: dict[str, Any] = json.loads(raw)
        return body

    def _wait(self, engines: int) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if sum("pid" in e for e in self.health()["engines"]) == engines:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError((self.dir / "server.log").read_text())

    def engine_processes(self) -> list[psutil.Process]:
        return [psutil.Process(int(e["pid"])) for e in self.health()["engines"] if "pid" in e]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(20)
        self._log.close()


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        t = p.cpu_times()
        total += t.user + t.system
    return total
