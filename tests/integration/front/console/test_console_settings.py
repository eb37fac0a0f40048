"""Settings changed from the console (PATCH /admin/api/settings) on a real front with two
fake-backend engines: saved to config.json, and applied live where they can be."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import httpx
import pytest

from coderai.config import load_config
from coderai.engine.backends.fake import fake_tokens
from tests.support.server import Server, serving, wait_for
from tests.support.sse import DONE, aiter_frames, content, event

KEY = "settings-admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
ENGINES = [{"name": "alpha", "backend": "cpu"}, {"name": "beta", "backend": "cpu"}]
MODELS: list[dict[str, Any]] = [
    {"id": "slow-alpha", "format": "fake", "engine": "alpha",
     "options": {"tokens_per_second": 20, "output_tokens": 10_000}},
    {"id": "free", "format": "fake", "options": {"output_tokens": 3}},
]  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = {"engine_specs": ENGINES, "heartbeat_interval": 0.2}
    with serving(tmp_path_factory.mktemp("settings"), config, MODELS, 2, KEY) as srv:
        yield srv


def current(srv: Server) -> dict[str, Any]:
    r = httpx.get(srv.url + "/admin/api/settings", headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def patch(srv: Server, changes: Any) -> httpx.Response:
    return httpx.patch(srv.url + "/admin/api/settings", json=changes, headers=AUTH, timeout=30)


@pytest.fixture(autouse=True)
def restored(server: Server) -> Iterator[None]:
    """Each test starts from the settings the server started with."""
    before = current(server)["values"]
    yield
    after = current(server)["values"]
    changed = {name: value for name, value in before.items() if after[name] != value}
    if changed:
        assert patch(server, changed).status_code == 200


def engine(srv: Server, name: str) -> dict[str, Any]:
    r = httpx.get(srv.url + "/admin/api/engines", headers=AUTH, timeout=10)
    view: dict[str, Any] = next(e for e in r.json()["engines"] if e["name"] == name)
    return view


def admin_models(srv: Server) -> list[dict[str, Any]]:
    r = httpx.get(srv.url + "/admin/api/models", headers=AUTH, timeout=10)
    models: list[dict[str, Any]] = r.json()["models"]
    return models


def queued(srv: Server) -> int:
    return int(srv.health()["queued"])


class Stream:
    """A streaming completion read on a thread, which stop() cuts short (the client goes
    away, so its job is cancelled)."""

    def __init__(self, url: str, model: str, tokens: int) -> None:
        self.body = {"model": model, "prompt": "p", "max_tokens": tokens, "stream": True}
        self.url = url
        self.events: list[dict[str, Any]] = []
        self.first = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        with httpx.stream("POST", self.url + "/v1/completions", json=self.body, timeout=60) as r:
            for line in r.iter_lines():
                if (e := event(line)) is not None:
                    self.events.append(e)
                    self.first.set()
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)

    def join(self) -> Stream:
        self.thread.join(60)
        return self

    def completed(self, tokens: int) -> bool:
        text = content(self.events)
        return self.events[-1] is DONE and text == "".join(fake_tokens("p", 0, tokens))


Open = Callable[[str, int], Stream]


@pytest.fixture
def stream(server: Server) -> Iterator[Open]:
    """Open streams; those still running when the test ends are cut."""
    opened: list[Stream] = []

    def open_stream(model: str, tokens: int) -> Stream:
        opened.append(Stream(server.url, model, tokens))
        return opened[-1]

    yield open_stream
    for each in opened:
        each.stop()


def test_settings_show_every_value_but_the_admin_key_and_the_engines(server: Server) -> None:
    body = current(server)
    assert body["values"]["server.max_parallel_requests"] == 8
    assert body["values"]["server.engine_specs"] == [{**e, "env": {}, "capabilities": None}
                                                     for e in ENGINES]  # fmt: skip
    assert "auth.admin_key" not in body["values"]
    assert KEY not in json.dumps(body)
    assert "server.max_queue" in body["live"]
    assert "server.port" in body["restart"]
    assert body["engines"] == ["alpha", "beta"]
    assert body["gpu_vendors"] == []  # CPU engines only


def test_with_one_request_at_a_time_the_next_two_run_one_after_the_other(
    server: Server, stream: Open
) -> None:
    r = patch(server, {"server.max_parallel_requests": 1})
    assert r.status_code == 200, r.text
    assert (r.json()["applied"], r.json()["at_restart"]) == (["server.max_parallel_requests"], [])
    assert engine(server, "alpha")["slots"] == 1
    first = stream("slow-alpha", 10_000)
    assert first.first.wait(10)
    second = stream("slow-alpha", 3)
    # the second waits in the front for the slot the first holds
    wait_for(lambda: queued(server) == 1)
    alpha = engine(server, "alpha")
    assert (alpha["slots"], alpha["free_slots"]) == (1, 0)
    assert not second.first.is_set()
    first.stop()
    assert second.join().completed(3)


def test_a_lowered_limit_lets_the_requests_running_past_it_finish(
    server: Server, stream: Open
) -> None:
    running = [stream("slow-alpha", 100) for _ in range(2)]  # 5 s each
    for each in running:
        assert each.first.wait(10)
    r = patch(server, {"server.max_parallel_requests": 1})
    assert r.status_code == 200, r.text
    # two run, so the next waits
    late = stream("slow-alpha", 3)
    wait_for(lambda: queued(server) == 1)
    for each in running:
        assert each.join().completed(100)
    assert late.join().completed(3)


def test_a_new_default_engine_serves_the_next_request(server: Server) -> None:
    owners = {m["id"]: m["owner"] for m in admin_models(server)}
    other = "beta" if owners["free"] == "alpha" else "alpha"
    r = patch(server, {"server.default_engine": other})
    assert r.status_code == 200, r.text
    assert r.json()["applied"] == ["server.default_engine"]
    body = {"model": "free", "prompt": "x", "max_tokens": 2}
    answer = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
    assert answer.headers["x-coderai-engine"] == other
    assert {m["id"]: m["owner"] for m in admin_models(server)}["free"] == other


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"server.max_queue": 5, "server.max_qeue": 5}, "server.max_qeue"),
        ({"server.max_queue": -1}, "server.max_queue"),
        ({"server.max_parallel_requests_overrides": {"alpha": 0}},
         "server.max_parallel_requests_overrides"),
        ({"server.default_engine": "gamma"}, "server.default_engine"),
        ({"auth.admin_key": "another-key"}, "auth.admin_key"),
        # what would keep the next start from serving
        ({"server.max_parallel_requests_overrides": {"gamma": 2}},
         "server.max_parallel_requests_overrides"),
        ({"server.host": "not a host!!"}, "server.host"),
        ({"models.catalogue": "nowhere.json"}, "models.catalogue"),
    ],
)  # fmt: skip
def test_an_unknown_setting_or_a_bad_value_is_a_400_naming_it(
    server: Server, changes: dict[str, Any], name: str
) -> None:
    saved = (server.workdir / "config.json").read_bytes()
    r = patch(server, changes)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == name
    assert name in error["message"]
    assert (server.workdir / "config.json").read_bytes() == saved
    assert current(server)["values"]["server.max_queue"] == 1024


def test_a_body_that_is_not_an_object_is_a_400(server: Server) -> None:
    assert patch(server, ["server.max_queue", 5]).status_code == 400


def test_config_json_gets_the_change_and_still_loads(server: Server) -> None:
    r = patch(server, {"server.max_queue": 77})
    assert r.status_code == 200, r.text
    assert r.json()["values"]["server.max_queue"] == 77
    path = server.workdir / "config.json"
    data = json.loads(path.read_text())
    assert data["server"]["max_queue"] == 77
    assert data["server"]["engine_specs"] == ENGINES  # as it was written
    assert "stream_backlog_chars" not in data["server"]  # no default spelled out
    assert load_config(path).server.max_queue == 77


def test_a_restart_setting_is_saved_and_reported_but_not_applied(
    server: Server, stream: Open
) -> None:
    r = patch(server, {"server.retry_after": 7, "server.max_queue": 0,
                       "server.max_parallel_requests": 1})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["at_restart"] == ["server.retry_after"]
    assert sorted(body["applied"]) == ["server.max_parallel_requests", "server.max_queue"]
    assert body["values"]["server.retry_after"] == 7
    assert load_config(server.workdir / "config.json").server.retry_after == 7
    busy = stream("slow-alpha", 10_000)
    assert busy.first.wait(10)
    # no slot and no room in the queue (applied live); the advice to retry is the old one
    full = httpx.post(server.url + "/v1/completions",
                      json={"model": "slow-alpha", "prompt": "x"}, timeout=10)  # fmt: skip
    busy.stop()
    assert full.status_code == 429
    assert full.headers["retry-after"] == "1"


def test_a_restarted_engine_takes_the_slots_configured_now(server: Server) -> None:
    r = patch(server, {"server.max_parallel_requests_overrides": {"alpha": 2}})
    assert r.status_code == 200, r.text
    assert (engine(server, "alpha")["slots"], engine(server, "beta")["slots"]) == (2, 8)
    old = engine(server, "alpha")["pid"]
    restart = httpx.post(server.url + "/admin/api/engines/alpha/restart", headers=AUTH,
                         timeout=30)  # fmt: skip
    assert restart.status_code == 200
    wait_for(lambda: engine(server, "alpha").get("pid") not in (None, old), timeout=30)
    server.engine_pids.append(engine(server, "alpha")["pid"])
    # started with the slots planned at start (8), it is held to the ones configured now
    assert engine(server, "alpha")["slots"] == 2


def test_a_console_gets_the_settings_on_connect_and_after_each_change(server: Server) -> None:
    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with (
            aiohttp.ClientSession(headers=AUTH) as session,
            session.get(server.url + "/admin/api/events") as feed,
        ):
            on_connect = await next_event(feed, "settings")
            change = {"server.queue_timeout": 42}
            async with session.patch(server.url + "/admin/api/settings", json=change) as r:
                assert r.status == 200
            return on_connect, await next_event(feed, "settings")

    on_connect, changed = asyncio.run(run())
    assert on_connect["values"]["server.queue_timeout"] == 300
    assert changed["values"]["server.queue_timeout"] == 42
    assert changed["engines"] == ["alpha", "beta"]


async def next_event(feed: aiohttp.ClientResponse, name: str) -> dict[str, Any]:
    """The data of the next event called `name` on an SSE feed."""
    async with asyncio.timeout(10):
        # read line by line: each call ends at the end of its event, where the next begins
        async for frame in aiter_frames(feed.content):
            if frame.name == name:
                data: dict[str, Any] = frame.json()
                return data
    raise AssertionError(f"the feed ended before a {name} event")
