"""Engines die, hang and restart while the front keeps serving (invariant 2: every
accepted request ends in exactly one terminal outcome)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from coderai.cli.engine import OPENMP_SPIN
from coderai.engine.backends.fake import fake_tokens
from tests.integration.conftest import StartServer
from tests.support.server import Server, site_hook, wait_for
from tests.support.sse import DONE, content, event, is_error

KEY = "supervision-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TWO = {
    "engine_specs": [{"name": "alpha", "backend": "cpu"}, {"name": "beta", "backend": "cpu"}],
    "heartbeat_interval": 0.2,
    "heartbeat_liveness": 5,
    "drain_grace_seconds": 1.0,
}
SLOW = {"tokens_per_second": 20, "output_tokens": 10_000}
MODELS: list[dict[str, Any]] = [
    {"id": "a-slow", "format": "fake", "engine": "alpha", "options": SLOW},
    {"id": "a-single", "format": "fake", "engine": "alpha",
     "options": {**SLOW, "capacity": 1}},
    {"id": "b-slow", "format": "fake", "engine": "beta", "options": SLOW},
    {"id": "crashy", "format": "fake", "engine": "alpha",
     "options": {"crash_after_tokens": 3, "tokens_per_second": 50}},
    {"id": "good", "format": "fake", "options": {"output_tokens": 5}},
]  # fmt: skip


def start_two(start_server: StartServer, **server: Any) -> Server:
    return start_server({**TWO, **server}, MODELS, engines=2,
                        extra_config={"auth": {"admin_key": KEY}})  # fmt: skip


def pid_of(srv: Server, name: str) -> int | None:
    engine = next(e for e in srv.health()["engines"] if e["name"] == name)
    pid = engine.get("pid")
    return int(pid) if pid is not None else None


def running_pid(srv: Server, name: str) -> int:
    pid = pid_of(srv, name)
    assert pid is not None, f"engine {name} is not on the bus"
    return pid


def replaced(srv: Server, name: str, old_pid: int) -> int:
    wait_for(lambda: pid_of(srv, name) not in (None, old_pid))
    pid = running_pid(srv, name)
    srv.engine_pids.append(pid)
    return pid


class Stream:
    """A streaming completion read on a thread: its text, its last event, when it ended."""

    def __init__(self, srv: Server, model: str, tokens: int) -> None:
        self.body = {"model": model, "prompt": "p", "max_tokens": tokens, "stream": True}
        self.url = srv.url
        self.events: list[dict[str, Any]] = []
        self.status = 0
        self.first = threading.Event()
        self.ended_at = 0.0
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        with httpx.stream("POST", self.url + "/v1/completions", json=self.body, timeout=60) as r:
            self.status = r.status_code
            for line in r.iter_lines():
                if (e := event(line)) is not None:
                    self.events.append(e)
                    self.first.set()
        self.first.set()
        self.ended_at = time.monotonic()

    def join(self) -> Stream:
        self.thread.join(60)
        return self

    def text(self) -> str:
        return content(self.events)


def test_sigkill_mid_stream_errors_that_stream_only_and_reruns_the_waiting_job(
    start_server: StartServer,
) -> None:
    srv = start_two(start_server)
    alpha = running_pid(srv, "alpha")
    victim = Stream(srv, "a-single", 100)
    assert victim.first.wait(10)
    waiting = Stream(srv, "a-single", 5)  # waits inside alpha for the single instance
    bystander = Stream(srv, "b-slow", 40)
    assert bystander.first.wait(10)
    # both of alpha's jobs are on alpha (8 slots), so the kill catches the waiting one there
    wait_for(lambda: next(e for e in srv.health()["engines"]
                          if e["name"] == "alpha")["free_slots"] == 6)  # fmt: skip
    killed_at = time.monotonic()
    os.kill(alpha, signal.SIGKILL)
    victim.join()
    assert is_error(victim.events[-1])
    assert victim.ended_at - killed_at < 3.0
    waiting.join()
    assert waiting.events[-1] is DONE
    assert waiting.text() == "".join(fake_tokens("p", 0, 5))
    bystander.join()
    assert bystander.events[-1] is DONE
    assert bystander.text() == "".join(fake_tokens("p", 0, 40))
    replaced(srv, "alpha", alpha)
    wait_for(lambda: srv.health()["engines"][0]["state"] == "ready")


def test_a_stopped_engine_is_detected_killed_and_replaced(start_server: StartServer) -> None:
    srv = start_two(start_server)
    alpha = running_pid(srv, "alpha")
    victim = Stream(srv, "a-slow", 200)
    assert victim.first.wait(10)
    stopped_at = time.monotonic()
    os.kill(alpha, signal.SIGSTOP)
    victim.join()
    assert "stopped responding" in victim.events[-1]["error"]["message"]
    assert victim.ended_at - stopped_at < 0.2 * 5 + 2
    replaced(srv, "alpha", alpha)
    wait_for(lambda: not psutil.pid_exists(alpha) or psutil.Process(alpha).status() == "zombie")


def test_an_engine_that_crashes_at_start_is_backed_off_and_the_other_serves(
    start_server: StartServer, tmp_path: Path
) -> None:
    # a broken environment: the interpreter exits before the engine's code runs
    broken = site_hook(tmp_path / "broken-site", "import os\nos._exit(3)\n")
    specs = [
        {"name": "alpha", "backend": "cpu", "env": broken},
        {"name": "beta", "backend": "cpu"},
    ]
    srv = start_server({**TWO, "engine_specs": specs}, MODELS, engines=1)

    def alpha() -> dict[str, Any]:
        health = srv.health()
        return next(e for e in health["engines"] if e["name"] == "alpha")

    wait_for(lambda: alpha()["state"] == "backoff" and alpha()["flapping"], timeout=15)
    assert srv.health()["status"] == "ok"
    r = httpx.post(srv.url + "/v1/completions",
                   json={"model": "good", "prompt": "x"}, timeout=10)  # fmt: skip
    assert (r.status_code, r.headers["x-coderai-engine"]) == (200, "beta")
    assert "engine alpha is flapping" in srv.log()


def test_restart_drains_then_respawns_while_the_other_engine_serves(
    start_server: StartServer,
) -> None:
    srv = start_two(start_server)
    alpha = running_pid(srv, "alpha")
    victim = Stream(srv, "a-slow", 400)
    bystander = Stream(srv, "b-slow", 60)
    assert victim.first.wait(10)
    r = httpx.post(srv.url + "/admin/api/engines/alpha/restart", headers=AUTH, timeout=30)
    assert r.status_code == 200
    assert r.json()["cancelled"] == 1
    victim.join()
    assert "drained" in victim.events[-1]["error"]["message"]
    replaced(srv, "alpha", alpha)
    bystander.join()
    assert bystander.events[-1] is DONE


def test_a_drained_engine_gets_no_new_requests(start_server: StartServer) -> None:
    srv = start_two(start_server)
    r = httpx.post(srv.url + "/admin/api/engines/alpha/drain", headers=AUTH, timeout=30)
    assert (r.status_code, r.json()["cancelled"]) == (200, 0)
    states = {e["name"]: e["state"] for e in srv.health()["engines"]}
    assert states == {"alpha": "draining", "beta": "ready"}
    # the admin API shows the same view of each engine
    admin = httpx.get(srv.url + "/admin/api/engines", headers=AUTH, timeout=10).json()
    assert {e["name"]: e["state"] for e in admin["engines"]} == states
    body = {"model": "a-slow", "prompt": "x", "max_tokens": 2}
    r = httpx.post(srv.url + "/v1/completions", json=body, timeout=10)
    assert r.headers["x-coderai-engine"] == "beta"
    missing = httpx.post(srv.url + "/admin/api/engines/gamma/drain", headers=AUTH)
    assert missing.status_code == 404


def test_metrics_count_requests_latency_and_engine_state(start_server: StartServer) -> None:
    srv = start_two(start_server)
    Stream(srv, "b-slow", 5).join()
    httpx.post(srv.url + "/v1/completions", json={"model": "nope", "prompt": "x"})
    text = httpx.get(srv.url + "/metrics").text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("coderai_requests_total",
                    (("route", "/v1/completions"), ("status", "200")))] >= 1  # fmt: skip
    assert samples[("coderai_requests_total",
                    (("route", "/v1/completions"), ("status", "404")))] == 1  # fmt: skip
    assert samples[("coderai_time_to_first_token_seconds_count", ())] >= 1
    assert samples[("coderai_inter_token_latency_seconds_count", ())] >= 1
    assert samples[("coderai_queue_depth", ())] == 0
    assert samples[("coderai_engine_in_flight", (("engine", "alpha"),))] == 0
    assert samples[("coderai_engine_restarts_total", (("engine", "alpha"),))] == 0
    assert samples[("coderai_bus_dropped_frames_total", ())] == 0


def test_sigterm_lets_a_running_stream_finish_then_stops_everything(
    start_server: StartServer,
) -> None:
    srv = start_two(start_server)
    engines = [psutil.Process(pid) for pid in srv.engine_pids]
    stream = Stream(srv, "b-slow", 30)  # 1.5 s at 20 tokens/s
    assert stream.first.wait(10)
    srv.proc.send_signal(signal.SIGTERM)
    stream.join()
    assert stream.events[-1] is DONE
    assert stream.text() == "".join(fake_tokens("p", 0, 30))
    assert srv.proc.wait(15) == 0
    _, alive = psutil.wait_procs(engines, timeout=5)
    assert alive == []
    assert list(srv.runtime.iterdir()) == []


def test_engines_start_with_a_brief_openmp_spin_unless_the_operator_set_one(
    start_server: StartServer,
) -> None:
    # read from each engine's own environment, as the OS started it: `coderai run` set it
    # for its children (see coderai.cli.engine.brief_openmp_spin)
    srv = start_server({}, MODELS[-1:], engines=2)
    operator = any(
        os.environ.get(name, "").strip() for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    )
    expected = os.environ.get("GOMP_SPINCOUNT") if operator else OPENMP_SPIN
    for pid in srv.engine_pids:
        env = psutil.Process(pid).environ()
        assert env.get("GOMP_SPINCOUNT") == expected
        assert env.get("OMP_WAIT_POLICY") == os.environ.get("OMP_WAIT_POLICY")


def test_engines_exit_when_the_front_is_killed(start_server: StartServer) -> None:
    srv = start_server({}, MODELS[-1:], engines=2)
    engines = [psutil.Process(pid) for pid in srv.engine_pids]
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(5)
    _, alive = psutil.wait_procs(engines, timeout=5)
    assert alive == []


def test_a_request_no_engine_takes_in_time_is_answered_503(start_server: StartServer) -> None:
    # a short grace: the stream that holds the slot need not finish at the stop
    srv = start_server({"queue_timeout": 1, "max_parallel_requests": 1,
                        "shutdown_grace_seconds": 0.5},
                       [{"id": "slow", "format": "fake", "options": SLOW}])  # fmt: skip
    busy = Stream(srv, "slow", 100)
    assert busy.first.wait(10)
    start = time.monotonic()
    r = httpx.post(srv.url + "/v1/completions", json={"model": "slow", "prompt": "x"}, timeout=10)
    assert r.status_code == 503
    assert "within 1 s" in r.json()["error"]["message"]
    assert time.monotonic() - start < 2.5
    srv.stop()
    busy.join()


def test_the_admin_api_unloads_an_idle_model(start_server: StartServer) -> None:
    srv = start_two(start_server)
    r = httpx.post(srv.url + "/v1/completions", json={"model": "good", "prompt": "x"},
                   timeout=10)  # fmt: skip
    engine = r.headers["x-coderai-engine"]

    def loaded() -> list[str]:
        return list(
            next(e for e in srv.health()["engines"] if e["name"] == engine)["loaded_models"]
        )

    wait_for(lambda: loaded() == ["good"])
    url = f"{srv.url}/admin/api/engines/{engine}/unload"
    r = httpx.post(url, json={"model": "good"}, headers=AUTH, timeout=10)
    assert (r.status_code, r.json()["state"]) == (202, "unloading")
    wait_for(lambda: loaded() == [])
    missing = httpx.post(url, json={"model": "nope"}, headers=AUTH, timeout=10)
    assert missing.status_code == 404
