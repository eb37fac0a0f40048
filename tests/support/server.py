"""A real `coderai run` in a subprocess, for integration tests and benchmarks."""

from __future__ import annotations

import contextlib
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from coderai.engine.backends.fake import fake_tokens, render_chat

REPO = Path(__file__).resolve().parents[2]


#: streams that have written their first token (every API's), as /metrics counts them
TTFT_COUNT = "coderai_time_to_first_token_seconds_count"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(cond: Callable[[], object], timeout: float = 10.0) -> float:
    """Poll until cond() is true; the seconds it took. Fails the test after `timeout`."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - start


def site_hook(folder: Path, code: str) -> dict[str, str]:
    """An engine environment whose interpreter runs `code` at start-up, before any of the
    engine's own code (a broken or hanging installation): merge it into a spec's env."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(code)
    return {"PYTHONPATH": str(folder)}


def expected_chat(content: str, tokens: int, seed: int = 0, token_chars: int = 0) -> str:
    """What the fake model streams for one user message (no stop sequences)."""
    prompt = render_chat([{"role": "user", "content": content}])
    return "".join(fake_tokens(prompt, seed, tokens, token_chars))


#: the machine folder the test session's servers share (repack.MACHINE_VARIABLE)
MACHINE = tempfile.mkdtemp(prefix="coderai-machine-")


class Server:
    def __init__(
        self,
        workdir: Path,
        server: dict[str, Any],
        models: list[dict[str, Any]] | None,
        env: dict[str, str] | None = None,
        argv: list[str] | None = None,
        models_config: dict[str, Any] | None = None,
        extra_config: dict[str, Any] | None = None,
    ) -> None:
        self.port = free_port()
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.runtime = workdir / "run"
        self.runtime.mkdir(exist_ok=True)
        config = {
            "server": {"port": self.port, **server},
            "models": models_config or {},
            **(extra_config or {}),
        }
        (workdir / "config.json").write_text(json.dumps(config))
        if models is not None:  # None: no catalogue, the embedded default is served
            (workdir / "models.json").write_text(json.dumps({"models": models}))
        self.log_path = workdir / "server.log"
        full_env = {**os.environ, "CODERAI_RUNTIME_DIR": str(self.runtime), **(env or {})}
        if "state_dir" in server and "CODERAI_MACHINE_DIR" not in (env or {}):
            # a test that names its state folder looks at what is learnt there
            full_env.pop("CODERAI_MACHINE_DIR", None)
        else:
            # what engines learn of the machine (llama.cpp's kernel trial, the attention
            # kernels' timings) is learnt once per test session, as one machine's servers
            # would share it
            full_env.setdefault("CODERAI_MACHINE_DIR", MACHINE)
        cmd = argv or [sys.executable, "-m", "coderai", "run"]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*cmd, "--config", str(workdir / "config.json")],
            cwd=workdir,
            env=full_env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self.engine_pids: list[int] = []

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> dict[str, Any]:
        """/healthz's body (it answers 503 while no engine serves)."""
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=5) as r:
                raw = r.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
        body: dict[str, Any] = json.loads(raw)
        return body

    def metric(self, sample: str) -> float:
        """A sample's value in /metrics (0 before it is first counted)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name == sample:
                return float(value)
        return 0.0

    @property
    def front(self) -> psutil.Process:
        return psutil.Process(self.proc.pid)

    def engine_processes(self) -> list[psutil.Process]:
        return [psutil.Process(int(e["pid"])) for e in self.health()["engines"] if "pid" in e]

    def wait_ready(self, engines: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                health = self.health()
            except OSError:  # not listening yet
                time.sleep(0.1)
                continue
            joined = [e for e in health["engines"] if "pid" in e]
            if len(joined) >= engines:
                self.engine_pids = [e["pid"] for e in joined]
                return
            time.sleep(0.1)
        raise TimeoutError(f"{engines} engines not ready in {timeout} s:\n{self.log()}")

    def bus_endpoint(self) -> str:
        (sock,) = self.runtime.glob("coderai-*/bus.sock")
        return f"ipc://{sock}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.engine_pids:
            if psutil.pid_exists(pid):
                with contextlib.suppress(psutil.NoSuchProcess):
                    psutil.Process(pid).kill()
        self._log.close()


@contextlib.contextmanager
def running(
    folder: Path, models: list[dict[str, Any]], cache: Path, **server: Any
) -> Iterator[Server]:
    """A test module's server: one engine serving `models` (converted GGUF weights cached
    in `cache`), ready when entered, stopped on leaving."""
    srv = Server(folder, {"engines": 1, **server}, models, env={"CODERAI_CACHE_DIR": str(cache)})
    try:
        srv.wait_ready(1)
        yield srv
    finally:
        srv.stop()


@contextlib.contextmanager
def serving(
    folder: Path, server: dict[str, Any], models: list[dict[str, Any]] | None,
    engines: int, admin_key: str, **kw: Any,
) -> Iterator[Server]:  # fmt: skip
    """A test module's server with the admin key set: ready (its `engines` joined) when
    entered, stopped on leaving."""
    extra = {**kw.pop("extra_config", {}), "auth": {"admin_key": admin_key}}
    srv = Server(folder, server, models, extra_config=extra, **kw)
    try:
        srv.wait_ready(engines)
        yield srv
    finally:
        srv.stop()


def openai_client(srv: Server) -> Any:
    """The official client against a server, failing at once (no retries)."""
    import openai

    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)
