"""Engines that crash or hang are replaced; the front cleans up after itself."""

from __future__ import annotations

import signal
import time

import httpx
import psutil

from tests.integration.conftest import StartServer

CRASHY = {"id": "crashy", "format": "fake",
          "options": {"crash_after_tokens": 3, "tokens_per_second": 50}}  # fmt: skip
HANGY = {"id": "hangy", "format": "fake",
         "options": {"hang_after_tokens": 3, "tokens_per_second": 50}}  # fmt: skip
GOOD = {"id": "good", "format": "fake", "options": {"output_tokens": 5}}
FAST_HEARTBEATS = {"heartbeat_interval": 0.2, "heartbeat_liveness": 5}


def _stream_events(url: str, model: str) -> list[str]:
    body = {"model": model, "messages": [{"role": "user", "content": "x"}], "stream": True}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=20) as r:
        assert r.status_code == 200
        return [line for line in r.iter_lines() if line.startswith("data: ")]


def _new_engine(srv: object, old_pid: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        engines = srv.health()["engines"]  # type: ignore[attr-defined]
        if engines and engines[0].get("pid", old_pid) != old_pid:
            return int(engines[0]["pid"])
        time.sleep(0.05)
    raise TimeoutError("the engine was not replaced")


def _serves(url: str) -> bool:
    body = {"model": "good", "messages": [{"role": "user", "content": "x"}]}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=10).status_code == 200


def test_an_engine_that_crashes_mid_stream_errors_the_stream_and_is_restarted(
    start_server: StartServer,
) -> None:
    srv = start_server({}, [CRASHY, GOOD])
    old_pid = srv.health()["engines"][0]["pid"]
    events = _stream_events(srv.url, "crashy")
    assert '"error"' in events[-1]
    assert "engine-0" in events[-1]
    new_pid = _new_engine(srv, old_pid)
    assert not psutil.pid_exists(old_pid)
    srv.engine_pids.append(new_pid)
    assert _serves(srv.url)


def test_a_hung_engine_is_detected_killed_and_replaced(start_server: StartServer) -> None:
    srv = start_server(FAST_HEARTBEATS, [HANGY, GOOD])
    old_pid = srv.health()["engines"][0]["pid"]
    start = time.monotonic()
    events = _stream_events(srv.url, "hangy")
    assert "stopped responding" in events[-1]
    assert time.monotonic() - start < 0.2 * 5 + 2
    new_pid = _new_engine(srv, old_pid)
    srv.engine_pids.append(new_pid)
    assert _serves(srv.url)
    assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == "zombie"


def test_sigterm_stops_engines_and_removes_the_runtime_directory(
    start_server: StartServer,
) -> None:
    srv = start_server({}, [GOOD], engines=2)
    engines = [psutil.Process(pid) for pid in srv.engine_pids]
    assert list(srv.runtime.glob("coderai-*/bus.sock"))
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.proc.wait(15) == 0
    _, alive = psutil.wait_procs(engines, timeout=5)
    assert alive == []
    assert list(srv.runtime.iterdir()) == []


def test_engines_exit_when_the_front_is_killed(start_server: StartServer) -> None:
    srv = start_server({}, [GOOD], engines=2)
    engines = [psutil.Process(pid) for pid in srv.engine_pids]
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(5)
    _, alive = psutil.wait_procs(engines, timeout=5)
    assert alive == []
