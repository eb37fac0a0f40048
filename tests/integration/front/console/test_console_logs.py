"""The console's logs (/admin/api/logs): the front's and each engine's recent lines, whole
and streamed, from a real server whose engine is a supervised process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from coderai.front.engines.supervisor import STOP_GRACE_SECONDS
from tests.support.server import Server, serving, wait_for
from tests.support.sse import iter_frames

KEY = "logs-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: the longest an engine may take to join; the server gives up on it after this
JOIN_TIMEOUT = 20.0
DRAIN_GRACE = 0.5
CONFIG = {
    "engine_specs": [{"name": "alpha", "backend": "cpu"}],
    "engine_join_timeout": JOIN_TIMEOUT,
    "drain_grace_seconds": DRAIN_GRACE,
}
MODELS: list[dict[str, Any]] = [{"id": "fake", "format": "fake"}]
#: what the engine process logs once it is on the bus
JOINED = "engine alpha joined the bus"
#: a restart drains the engine, stops it and waits for the next one to join
RESTART_TIMEOUT = DRAIN_GRACE + STOP_GRACE_SECONDS + JOIN_TIMEOUT


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("logs"), CONFIG, MODELS, 1, KEY) as srv:
        yield srv


def lines(srv: Server, source: str) -> list[str]:
    r = httpx.get(srv.url + "/admin/api/logs", params={"source": source}, headers=AUTH)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["source"] == source
    found: list[str] = body["lines"]
    return found


def alpha_pid(srv: Server) -> int | None:
    pid = next(e for e in srv.health()["engines"] if e["name"] == "alpha").get("pid")
    return int(pid) if pid is not None else None


def restart_alpha(srv: Server) -> None:
    """Restart the engine and wait until its next incarnation has joined."""
    old = alpha_pid(srv)
    r = httpx.post(srv.url + "/admin/api/engines/alpha/restart", headers=AUTH,
                   timeout=RESTART_TIMEOUT)  # fmt: skip
    assert r.status_code == 200, r.text
    wait_for(lambda: alpha_pid(srv) not in (None, old), RESTART_TIMEOUT)
    pid = alpha_pid(srv)
    assert pid is not None
    srv.engine_pids.append(pid)


def streamed_until(
    srv: Server, source: str, act: Callable[[], None], wanted: Callable[[str], bool]
) -> dict[str, Any]:
    """Open the source's stream with no backlog, `act`, then read until a line is wanted;
    its event's data."""
    params = {"source": source, "lines": "0"}
    url = srv.url + "/admin/api/logs/stream"
    with httpx.stream("GET", url, params=params, headers=AUTH, timeout=RESTART_TIMEOUT) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream"
        # its headers came once the server followed the source: every later line is sent
        act()
        for frame in iter_frames(r.iter_bytes()):
            if frame.name == "log":
                data: dict[str, Any] = frame.json()
                assert data["source"] == source
                if wanted(data["line"]):
                    return data
    raise AssertionError("the stream ended without the line")


def test_an_engines_own_lines_are_kept_under_its_name_and_still_reach_the_terminal(
    server: Server,
) -> None:
    wait_for(lambda: any(JOINED in line for line in lines(server, "alpha")), JOIN_TIMEOUT)
    joined = next(line for line in lines(server, "alpha") if JOINED in line)
    # unchanged, as the engine wrote it: its own process id, not the front's
    assert f"[{server.engine_pids[0]}]" in joined
    assert joined in server.log()
    assert not any(JOINED in line for line in lines(server, "front"))


def test_the_front_keeps_its_own_log_lines(server: Server) -> None:
    started = [line for line in lines(server, "front") if "started engine alpha" in line]
    assert started
    assert f"coderai.supervisor[{server.proc.pid}]: " in started[0]


def test_a_stream_sends_a_front_line_logged_after_it_opened(server: Server) -> None:
    data = streamed_until(server, "front", lambda: restart_alpha(server),
                          lambda line: "engine alpha restarted" in line)  # fmt: skip
    assert data["line"] in server.log()


def test_a_stream_sends_a_restarted_engines_lines_under_its_name(server: Server) -> None:
    data = streamed_until(server, "alpha", lambda: restart_alpha(server),
                          lambda line: JOINED in line)  # fmt: skip
    assert f"[{server.engine_pids[-1]}]" in data["line"]


def test_logs_answer_only_to_the_admin(server: Server) -> None:
    for path in ("logs", "logs/stream"):
        r = httpx.get(f"{server.url}/admin/api/{path}", params={"source": "front"})
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "invalid_admin_key"


def test_an_unknown_source_is_404_and_a_bad_line_count_400_naming_it(server: Server) -> None:
    for path in ("logs", "logs/stream"):
        url = f"{server.url}/admin/api/{path}"
        missing = httpx.get(url, params={"source": "gamma"}, headers=AUTH)
        assert missing.status_code == 404
        assert missing.json()["error"]["param"] == "source"
        for bad in ("-1", "ten", ""):
            r = httpx.get(url, params={"source": "front", "lines": bad}, headers=AUTH)
            assert r.status_code == 400
            assert r.json()["error"]["param"] == "lines"
