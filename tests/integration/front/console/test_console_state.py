"""The front's state survives a kill -9 in the middle of writing it: config.json and
models.json parse, the database passes its integrity check, every change that was
answered is there, and the restarted front serves with it."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from coderai.catalogue.entries import load_catalogue
from coderai.config import load_config
from coderai.state.database import Database
from tests.support.server import Server, wait_for

KEY = "admin-key-for-tests"
MODELS: list[dict[str, Any]] = [{"id": "small", "format": "fake", "options": {"output_tokens": 4}}]
#: answered writes of each kind before the kill
WRITES = 15


@pytest.mark.timeout(120)
def test_kill_9_during_a_burst_of_writes_leaves_every_file_whole(tmp_path: Path) -> None:
    workdir = tmp_path / "state"
    srv = Server(workdir, {"engines": 1}, MODELS, extra_config={"auth": {"admin_key": KEY}})
    srv.wait_ready(1)
    answered: dict[str, list[Any]] = {"settings": [], "keys": [], "models": []}
    stop = threading.Event()

    def write(kind: str) -> None:
        with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {KEY}"}) as c:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    if kind == "settings":
                        r = c.patch("/admin/api/settings", json={"server.max_queue": 100 + i})
                        value: Any = 100 + i
                    elif kind == "keys":
                        r = c.post("/admin/api/keys", json={"name": f"k{i}"})
                        value = r.json().get("id") if r.status_code == 201 else None
                    else:
                        extra = {"id": f"m{i}", "format": "fake"}
                        r = c.put("/admin/api/models", json={"models": [*MODELS, extra]})
                        value = f"m{i}"
                except httpx.HTTPError:
                    return  # the front is gone
                assert r.status_code in (200, 201), r.text
                answered[kind].append(value)

    writers = [threading.Thread(target=write, args=(k,), daemon=True) for k in answered]
    for writer in writers:
        writer.start()
    try:
        wait_for(lambda: all(len(v) >= WRITES for v in answered.values()), timeout=60)
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait()
    finally:
        stop.set()
        for writer in writers:
            writer.join(10)
        srv.stop()

    config = load_config(workdir / "config.json")
    # the last answered write is on disk (a later one may be too: it was written, and the
    # kill came before its answer)
    assert config.server.max_queue >= answered["settings"][-1]
    ids = [e.id for e in load_catalogue(workdir / "models.json").entries]
    assert ids[0] == "small" and int(ids[1][1:]) >= int(answered["models"][-1][1:])
    db = Database(workdir)
    try:
        assert db.integrity() == "ok"
        stored = {k.id for k in db.api_keys()}
        assert set(answered["keys"]) <= stored
    finally:
        db.close()

    again = Server(workdir, {"engines": 1}, None, extra_config={"auth": {"admin_key": KEY}})
    try:
        again.wait_ready(1)
        with httpx.Client(base_url=again.url, headers={"Authorization": f"Bearer {KEY}"}) as c:
            keys = {k["id"] for k in c.get("/admin/api/keys").json()["keys"]}
            assert set(answered["keys"]) <= keys
    finally:
        again.stop()
