"""Two engines: ownership, pins, late binding and the admin view of them."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from tests.support.server import Server, serving
from tests.support.sse import DONE, event

KEY = "test-admin-key"
ENGINES = [{"name": "alpha", "backend": "cpu"}, {"name": "beta", "backend": "cpu"}]
LOAD_SECONDS = 5.0
MODELS: list[dict[str, Any]] = [
    {"id": "on-alpha", "format": "fake", "engine": "alpha"},
    {"id": "on-beta", "format": "fake", "engine": "beta",
     "options": {"tokens_per_second": 50, "output_tokens": 1000}},
    {"id": "slow-load", "format": "fake", "engine": "alpha",
     "options": {"load_seconds": LOAD_SECONDS}},
    {"id": "ghost-pin", "format": "fake", "engine": "gamma"},
    {"id": "free-1", "format": "fake"},
    {"id": "free-2", "format": "fake"},
]  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = {"engine_specs": ENGINES, "heartbeat_interval": 0.2}
    with serving(tmp_path_factory.mktemp("placement"), config, MODELS, 2, KEY) as srv:
        yield srv


def served_by(srv: Server, model: str) -> str:
    body = {"model": model, "prompt": "x", "max_tokens": 2}
    r = httpx.post(srv.url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.headers["x-coderai-engine"]


def admin(srv: Server, what: str) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/admin/api/{what}", headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_pinned_models_are_served_by_their_engine(server: Server) -> None:
    assert served_by(server, "on-alpha") == "alpha"
    assert served_by(server, "on-beta") == "beta"


def test_unpinned_models_are_balanced_over_the_engines(server: Server) -> None:
    owners = {m["id"]: m["owner"] for m in admin(server, "models")["models"]}
    assert {owners["free-1"], owners["free-2"]} == {"alpha", "beta"}
    assert served_by(server, "free-1") == owners["free-1"]
    assert served_by(server, "free-2") == owners["free-2"]


def test_a_bad_pin_is_reported_and_falls_back_with_one_log_line(server: Server) -> None:
    models = {m["id"]: m for m in admin(server, "models")["models"]}
    assert "'gamma' does not exist" in models["ghost-pin"]["warning"]
    # it falls back to the owner placement gave it, and stays there
    owner = models["ghost-pin"]["owner"]
    assert owner in {"alpha", "beta"}
    assert {served_by(server, "ghost-pin") for _ in range(3)} == {owner}
    line = "model ghost-pin is pinned to engine gamma"
    assert server.log().count(line) == 1


def test_a_model_loading_on_one_engine_never_delays_another_engines_stream(
    server: Server,
) -> None:
    body = {"model": "on-beta", "prompt": "x", "max_tokens": 200, "stream": True}

    async def run() -> tuple[list[float], dict[str, Any]]:
        arrivals: list[float] = []
        during: dict[str, Any] = {}
        begun = asyncio.Event()
        async with aiohttp.ClientSession() as session:

            async def stream() -> None:
                async with session.post(server.url + "/v1/completions", json=body) as r:
                    async for line in r.content:
                        if event(line) not in (None, DONE):
                            arrivals.append(time.monotonic())
                            begun.set()

            task = asyncio.create_task(stream())
            await begun.wait()
            load = {"model": "slow-load", "prompt": "x", "max_tokens": 2}
            loading = asyncio.create_task(session.post(server.url + "/v1/completions", json=load))
            # the next heartbeat shows the load under way (it lasts LOAD_SECONDS)
            while "slow-load" not in during.get("alpha", {}).get("loading", {}):
                async with session.get(server.url + "/healthz") as r:
                    during["alpha"] = next(
                        e for e in (await r.json())["engines"] if e["name"] == "alpha"
                    )
                await asyncio.sleep(0.05)
            during["stream_events_by_then"] = len(arrivals)
            await task
            (await loading).close()
        return arrivals, during

    arrivals, during = asyncio.run(run())
    assert during["stream_events_by_then"] < len(arrivals), "the load overlapped the stream"
    gaps = [b - a for a, b in itertools.pairwise(arrivals[1:])]  # from the second event
    assert len(gaps) > 150
    # a stream stalled by the load would wait for all of it; a loaded 2-core machine can
    # delay an event by tens of milliseconds, never by a large part of the load
    assert max(gaps) < LOAD_SECONDS / 5, f"longest gap {max(gaps) * 1000:.0f} ms"


def test_admin_api_needs_the_key(server: Server) -> None:
    assert httpx.get(server.url + "/admin/api/engines").status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert httpx.get(server.url + "/admin/api/engines", headers=wrong).status_code == 401


def test_admin_engines_lists_every_engine(server: Server) -> None:
    served = {served_by(server, "on-alpha"), served_by(server, "on-beta")}
    engines = admin(server, "engines")["engines"]
    assert [e["name"] for e in engines] == ["alpha", "beta"] == sorted(served)
    for e in engines:
        assert e["backend"] == "cpu"
        assert "fake" in e["capabilities"]
        assert e["state"] in {"ready", "loading"}
        assert e["gpus"] == []
        # nothing runs now: every slot is free
        assert e["free_slots"] == e["slots"] >= 1 and e["in_flight"] == 0
    loaded = {e["name"]: e["loaded_models"] for e in engines}
    assert "on-alpha" in loaded["alpha"] and "on-alpha" not in loaded["beta"]
    assert "on-beta" in loaded["beta"] and "on-beta" not in loaded["alpha"]


def test_saving_the_catalogue_reports_bad_pins_and_replaces_the_file_whole(
    server: Server, tmp_path: Path
) -> None:
    """The catalogue is written to a new file that then takes the old one's name (a
    reader sees the old file or the new one, never half of one): the name's inode changes,
    and no temporary file is left beside it."""
    catalogue = server.workdir / "models.json"
    before = catalogue.stat().st_ino
    new = {"models": [*MODELS, {"id": "misfit", "format": "fake", "engine": "delta"}]}
    r = httpx.put(server.url + "/admin/api/models", json=new,
                  headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
    assert r.status_code == 200, r.text
    assert any("misfit" in w and "'delta' does not exist" in w for w in r.json()["warnings"])
    saved = json.loads(catalogue.read_text())
    assert [m["id"] for m in saved["models"]][-1] == "misfit"
    assert catalogue.stat().st_ino != before
    assert [p.name for p in server.workdir.iterdir() if "models.json" in p.name] == ["models.json"]
    assert served_by(server, "misfit") in {"alpha", "beta"}
    bad = httpx.put(server.url + "/admin/api/models", json={"models": [{"id": ""}]},
                    headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
    assert bad.status_code == 400
