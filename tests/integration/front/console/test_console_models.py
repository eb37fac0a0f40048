"""The console's Models page through the admin API: add, edit, pin, load, unload, remove,
each saved to models.json and in force for the next request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.server import Server, wait_for

KEY = "admin-key-for-tests"
MODELS: list[dict[str, Any]] = [{"id": "first", "format": "fake"}]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("models"), {"engines": 1}, MODELS,
                    extra_config={"auth": {"admin_key": KEY}})  # fmt: skip
    try:
        server.wait_ready(1)
        yield server
    finally:
        server.stop()


@pytest.fixture
def admin(srv: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {KEY}"}) as c:
        yield c


def on_disk(srv: Server) -> list[dict[str, Any]]:
    models: list[dict[str, Any]] = json.loads((srv.workdir / "models.json").read_text())["models"]
    return models


def chat(srv: Server, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=30)


def test_a_model_added_with_a_bad_pin_warns_and_still_serves(
    srv: Server, admin: httpx.Client
) -> None:
    answer = admin.post("/admin/api/models", json={"id": "org/added", "format": "fake",
                                                   "engine": "nowhere"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    added = next(m for m in body["models"] if m["id"] == "org/added")
    assert added["pin"] == "nowhere" and "nowhere" in added["warning"]
    assert any(w.startswith("org/added:") for w in body["warnings"])
    assert body["engines"] == ["engine-0"]
    assert {"id": "org/added", "format": "fake", "engine": "nowhere"} in on_disk(srv)
    assert chat(srv, "org/added").status_code == 200  # falls back to a compatible engine


def test_an_edit_changes_only_the_fields_sent_and_null_unpins(
    srv: Server, admin: httpx.Client
) -> None:
    admin.post("/admin/api/models", json={"id": "edited", "format": "fake", "engine": "x"})
    answer = admin.patch("/admin/api/models/edited", json={"engine": None, "alias": "e2"})
    assert answer.status_code == 200, answer.text
    edited = next(m for m in answer.json()["models"] if m["id"] == "edited")
    assert edited["pin"] is None and edited["warning"] is None and edited["alias"] == "e2"
    assert chat(srv, "e2").status_code == 200
    renamed = admin.patch("/admin/api/models/edited", json={"id": "other"})
    assert renamed.status_code == 400 and renamed.json()["error"]["param"] == "id"


def test_a_model_is_loaded_and_unloaded_on_request(srv: Server, admin: httpx.Client) -> None:
    admin.post("/admin/api/models", json={"id": "loadable", "format": "fake"})

    def loaded() -> list[str]:
        return list(srv.health()["engines"][0]["loaded_models"])

    answer = admin.post("/admin/api/models/loadable/load")
    assert answer.status_code == 202 and answer.json()["engine"] == "engine-0"
    wait_for(lambda: "loadable" in loaded())
    assert admin.post("/admin/api/models/loadable/unload").status_code == 202
    wait_for(lambda: "loadable" not in loaded())


def test_a_removed_model_is_gone_from_the_file_and_the_api(
    srv: Server, admin: httpx.Client
) -> None:
    admin.post("/admin/api/models", json={"id": "doomed", "format": "fake"})
    assert admin.delete("/admin/api/models/doomed").status_code == 200
    assert all(m["id"] != "doomed" for m in on_disk(srv))
    assert chat(srv, "doomed").status_code == 404


def test_wrong_model_edits_are_refused_with_their_reason(admin: httpx.Client) -> None:
    assert (
        admin.post("/admin/api/models", json={"id": "first", "format": "fake"}).status_code == 409
    )
    assert admin.patch("/admin/api/models/absent", json={}).status_code == 404
    assert admin.delete("/admin/api/models/absent").status_code == 404
    assert admin.post("/admin/api/models/absent/load").status_code == 404
    bad = admin.post("/admin/api/models", json={"id": "x", "format": "nope"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "format"
    clash = admin.post("/admin/api/models", json={"id": "y", "format": "fake", "alias": "first"})
    assert clash.status_code == 400 and "first" in clash.json()["error"]["message"]


def test_a_model_option_no_backend_reads_is_refused_naming_it(admin: httpx.Client) -> None:
    """`speculative` with a value no engine honours is a 400, never accepted and ignored."""
    body = {"id": "z", "format": "fake", "options": {"speculative": "ngram"}}
    refused = admin.post("/admin/api/models", json=body)
    assert refused.status_code == 400
    assert "'speculative': not read by the fake backend" in refused.json()["error"]["message"]
    assert "z" not in [m["id"] for m in admin.get("/admin/api/models").json()["models"]]
