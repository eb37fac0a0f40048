"""Model files the front cannot use (FIFOs, missing files): checking them never stalls the
front, and the admin view names each one with its model."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartServer
from tests.support.server import Server

KEY = "test-admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
FAKE = {"id": "fake", "format": "fake"}
#: how long /healthz may take to answer while a catalogue is being checked
QUICK = 2.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(
        tmp_path_factory.mktemp("model-files"),
        {"engines": 1},
        [FAKE],
        extra_config={"auth": {"admin_key": KEY}},
    )
    try:
        srv.wait_ready(1)
        yield srv
    finally:
        srv.stop()


def admin_models(srv: Server) -> dict[str, Any]:
    r = httpx.get(srv.url + "/admin/api/models", headers=AUTH, timeout=QUICK)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def warning_for(body: dict[str, Any], model_id: str) -> str:
    """The model's warning, checked to be the same in its entry and in the summary list."""
    (model,) = [m for m in body["models"] if m["id"] == model_id]
    warning: str = model["warning"]
    assert f"{model_id}: {warning}" in body["warnings"]
    return warning


def complete(srv: Server, model: str) -> httpx.Response:
    body = {"model": model, "prompt": "x", "max_tokens": 2}
    return httpx.post(srv.url + "/v1/completions", json=body, timeout=30)


def test_a_catalogue_naming_a_fifo_is_refused_while_healthz_keeps_answering(
    server: Server, tmp_path: Path
) -> None:
    fifo = tmp_path / "piped.gguf"
    os.mkfifo(fifo)
    before = admin_models(server)
    body = {"models": [FAKE, {"id": "piped", "path": str(fifo)}]}

    async def put_and_probe() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=QUICK) as client:
            put = asyncio.create_task(client.put("/admin/api/models", json=body, headers=AUTH))
            await asyncio.sleep(0)  # the PUT is on its way before /healthz is asked
            during = await client.get("/healthz")
            return await put, during

    put, during = asyncio.run(put_and_probe())
    assert during.status_code == 200
    assert put.status_code == 400, put.text
    message = put.json()["error"]["message"]
    assert "piped" in message and str(fifo) in message and "FIFO" in message
    assert httpx.get(server.url + "/healthz", timeout=QUICK).status_code == 200
    assert admin_models(server) == before, "a refused catalogue changes nothing"


def test_a_missing_model_file_is_reported_by_the_save_and_by_later_reads(
    server: Server, tmp_path: Path
) -> None:
    absent = tmp_path / "absent.gguf"
    body = {"models": [FAKE, {"id": "absent", "path": str(absent)}]}
    saved = httpx.put(server.url + "/admin/api/models", json=body, headers=AUTH, timeout=10)
    assert saved.status_code == 200, saved.text
    assert str(absent) in warning_for(saved.json(), "absent")
    assert str(absent) in warning_for(admin_models(server), "absent")
    assert complete(server, "absent").json()["error"]["code"] == "model_file_error"


def test_a_fifo_in_the_startup_catalogue_is_only_that_models_error(
    start_server: StartServer, tmp_path: Path
) -> None:
    fifo = tmp_path / "piped.gguf"
    os.mkfifo(fifo)
    models = [FAKE, {"id": "piped", "path": str(fifo)}]
    srv = start_server({}, models, extra_config={"auth": {"admin_key": KEY}})
    assert httpx.get(srv.url + "/healthz", timeout=QUICK).status_code == 200
    refused = complete(srv, "piped")
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "model_file_error"
    assert str(fifo) in refused.json()["error"]["message"]
    assert "FIFO" in warning_for(admin_models(srv), "piped")
    assert complete(srv, "fake").status_code == 200
