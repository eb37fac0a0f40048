"""llama.cpp's own `llama-server`, started as a user would, for benchmarks that run it
beside `coderai run` (built once from the vendored sources by bench/llamacpp_peer.py)."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from bench.lib.server import free_port

#: how long a model may take to load before the server is given up on
START_SECONDS = 120


@contextlib.contextmanager
def llama_server(args: list[str], log: Path | None = None) -> Iterator[str]:
    """`llama-server` with `args` (all but the port) on a free port, its output in `log`
    (else dropped); yields its URL once /health answers 200, stops it after."""
    from bench.llamacpp_peer import ensure_built  # builds llama-server once (~12 min)

    port = free_port()
    command = [str(ensure_built()["llama-server"]), "--port", str(port), *args]
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(log.open("wb")) if log else subprocess.DEVNULL
        proc = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"llama-server did not start (log: {log})") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def log_file(name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"llama-server-{name}.log"
