"""Start and stop a real `coderai run` for benchmarks."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from coderai.engine.backends.llamacpp.machine import MACHINE_VARIABLE, state_folder
from tests.support.server import Server, free_port

__all__ = ["BenchServer", "cpu_seconds", "free_port"]

# a bench's engines and the bench itself (what it gives peers: backend.flash_for) read
# one machine folder, the user's, and keep what they learn there between runs
os.environ.setdefault(MACHINE_VARIABLE, str(state_folder()))


class BenchServer(Server):
    """The tests' server, in a fresh temporary folder, logging warnings only, ready once
    its engines have joined."""

    def __init__(
        self,
        server: dict[str, Any],
        models: list[dict[str, Any]],
        engines: int,
        extra: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        folder = Path(tempfile.mkdtemp(prefix="coderai-bench-"))
        super().__init__(folder, {"engines": engines, **server}, models,
                         env={"CODERAI_LOG_LEVEL": "WARNING", **(env or {})},
                         extra_config=extra)  # fmt: skip
        self.dir = folder
        self.wait_ready(engines, timeout=30)


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        t = p.cpu_times()
        total += t.user + t.system
    return total


@contextlib.contextmanager
def serving(entry: dict[str, Any]) -> Iterator[str]:
    """`coderai run` with one engine serving a catalogue entry; yields its URL, stops it
    after."""
    server = BenchServer({}, [entry], engines=1)
    try:
        yield server.url
    finally:
        server.stop()
