"""Shutdown, engines that never join and requests that kill engines: every request still
ends in exactly one outcome, promptly (invariant 2)."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.integration.conftest import StartServer
from tests.support.server import Server, site_hook, wait_for
from tests.support.sse import event

SLOW = {"tokens_per_second": 20, "output_tokens": 10_000}


class Request:
    """One request on a thread: its status, its events (streams) or body, how it ended."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        self.url, self.body = url, body
        self.status = 0
        self.events: list[dict[str, Any]] = []
        self.json: dict[str, Any] = {}
        self.error: Exception | None = None
        self.first = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json=self.body,
                              timeout=60) as r:  # fmt: skip
                self.status = r.status_code
                if r.headers["content-type"].startswith("application/json"):
                    self.json = json.loads(r.read())
                    return
                for line in r.iter_lines():  # raises if the body is cut short
                    if (e := event(line)) is not None:
                        self.events.append(e)
                        self.first.set()
        except Exception as exc:
            self.error = exc
        finally:
            self.first.set()

    def join(self) -> Request:
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self


def test_sigterm_ends_streams_with_an_error_event_and_queued_requests_with_503(
    start_server: StartServer,
) -> None:
    grace = 2.0
    streams_n, queued_n = 20, 5
    srv = start_server({"max_parallel_requests": streams_n, "shutdown_grace_seconds": grace},
                       [{"id": "slow", "format": "fake", "options": SLOW}])  # fmt: skip
    body = {"model": "slow", "prompt": "p", "max_tokens": 5_000}
    streams = [Request(srv.url, {**body, "stream": True}) for _ in range(streams_n)]
    assert all(s.first.wait(20) for s in streams)
    queued = [Request(srv.url, {**body, "stream": i % 2 == 0}) for i in range(queued_n)]
    wait_for(lambda: srv.health()["queued"] == queued_n)
    sent_at = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    for stream in streams:
        stream.join()
        assert stream.error is None, stream.error  # the chunked body ended properly
        assert (stream.status, len(stream.events) > 1) == (200, True)
        assert stream.events[-1]["error"]["code"] == "shutting_down"
    for request in queued:
        request.join()
        assert request.error is None, request.error
        assert request.status == 503
        assert request.json["error"]["code"] == "shutting_down"
    assert srv.proc.wait(grace + 3) == 0
    assert time.monotonic() - sent_at < grace + 3


def test_an_engine_that_never_joins_is_killed_and_its_requests_get_503(
    start_server: StartServer, tmp_path: Path
) -> None:
    # the engine's interpreter hangs before any of its code runs: it never says HELLO
    hang = site_hook(tmp_path / "hang-site", "import time\ntime.sleep(3600)\n")
    join_timeout = 2.0
    config = {
        "engine_specs": [{"name": "alpha", "backend": "cpu", "env": hang}],
        "engine_join_timeout": join_timeout,
        "queue_timeout": 60,
    }
    srv = Server(tmp_path / "srv", config, [{"id": "m", "format": "fake"}])
    try:
        wait_for(lambda: _answers(srv))
        # no engine serves: /health says so, as orchestration tools expect
        health = httpx.get(srv.url + "/health", timeout=10)
        assert health.status_code == 503 and health.json()["error"]["code"] == "no_engine"
        started = time.monotonic()
        r = httpx.post(srv.url + "/v1/completions", json={"model": "m", "prompt": "x"},
                       timeout=60)  # fmt: skip
        waited = time.monotonic() - started
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "no_engine"
        assert waited < join_timeout + 3  # not queue_timeout
        assert "did not join the bus within 2 s" in srv.log()
        # while it has not joined since, a request does not wait for it at all
        started = time.monotonic()
        r = httpx.post(srv.url + "/v1/completions", json={"model": "m", "prompt": "x"},
                       timeout=60)  # fmt: skip
        assert r.status_code == 503
        assert time.monotonic() - started < join_timeout
        # it counts as a failure at start: restarted, and backed off once it repeats
        wait_for(lambda: _alpha(srv).get("restarts", 0) >= 2, timeout=join_timeout * 4 + 5)
    finally:
        srv.stop()


def _answers(srv: Server) -> bool:
    try:
        httpx.get(srv.url + "/healthz", timeout=2)
    except httpx.TransportError:
        return False
    return True


def _alpha(srv: Server) -> dict[str, Any]:
    return next(e for e in srv.health()["engines"] if e["name"] == "alpha")


def test_a_request_that_kills_its_engine_is_retried_once_not_spread(
    start_server: StartServer,
) -> None:
    specs = [{"name": "alpha", "backend": "cpu"}, {"name": "beta", "backend": "cpu"}]
    models = [
        {"id": "poison", "format": "fake", "options": {"crash_after_tokens": 0}},
        {"id": "good", "format": "fake", "options": {"output_tokens": 3}},
    ]
    srv = start_server({"engine_specs": specs}, models, engines=2)
    r = httpx.post(srv.url + "/v1/completions", json={"model": "poison", "prompt": "x"},
                   timeout=60)  # fmt: skip
    assert r.status_code == 503
    message = r.json()["error"]["message"]
    assert "the request itself is the likely cause" in message
    # two engine deaths in all: the first engine's, and the one retry's
    wait_for(lambda: sum(e.get("restarts", 0) for e in srv.health()["engines"]) == 2)
    wait_for(lambda: all("pid" in e for e in srv.health()["engines"]))
    assert sum(e["restarts"] for e in srv.health()["engines"]) == 2
    ok = httpx.post(srv.url + "/v1/completions", json={"model": "good", "prompt": "x"},
                    timeout=30)  # fmt: skip
    assert ok.status_code == 200
