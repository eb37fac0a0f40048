"""One model on two engines (`replicas: 2`) behind a real `coderai run`: conversations
spread over the replicas and stay on theirs, a client's own key keeps one together, the
policy changes live, and a replica's death sends its waiting request to the other."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.server import Server, serving, wait_for

KEY = "test-admin-key"
ENGINES = [{"name": "alpha", "backend": "cpu"}, {"name": "beta", "backend": "cpu"}]
MODELS: list[dict[str, Any]] = [
    {"id": "coder", "format": "fake", "replicas": 2, "options": {"output_tokens": 4}},
    {"id": "slow-coder", "format": "fake", "engines": ["beta", "alpha"],
     "options": {"output_tokens": 4, "load_seconds": 3}},
]  # fmt: skip


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = {"engine_specs": ENGINES, "heartbeat_interval": 0.2}
    with serving(tmp_path_factory.mktemp("replicas"), config, MODELS, 2, KEY) as server:
        yield server


def ask(srv: Server, model: str, system: str, turn: str, **extra: Any) -> str:
    """One chat turn; the engine that answered it (X-CoderAI-Engine)."""
    body = {"model": model, "max_tokens": 4, **extra,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": "start"},
                         {"role": "user", "content": turn}]}  # fmt: skip
    answer = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.headers["X-CoderAI-Engine"]


def admin(srv: Server) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)


def test_the_catalogue_names_each_models_replicas(srv: Server) -> None:
    with admin(srv) as client:
        models = {m["id"]: m for m in client.get("/admin/api/models").json()["models"]}
    assert models["coder"]["replicas"] == ["alpha", "beta"]
    assert models["slow-coder"]["replicas"] == ["beta", "alpha"]
    assert models["coder"]["warning"] is None


def test_conversations_spread_over_the_replicas_and_each_stays_on_its_own(srv: Server) -> None:
    homes: dict[str, set[str]] = {}
    for turn in range(3):
        for agent in range(4):
            system = f"You are agent {agent}."
            homes.setdefault(system, set()).add(ask(srv, "coder", system, f"turn {turn}"))
    assert all(len(engines) == 1 for engines in homes.values()), homes
    assert set().union(*homes.values()) == {"alpha", "beta"}
    both = [e["loaded_models"] for e in srv.health()["engines"]]
    assert all("coder" in loaded for loaded in both)


def test_a_clients_own_key_keeps_its_requests_on_one_replica(srv: Server) -> None:
    seen = {ask(srv, "coder", f"prompt {i}", "x", prompt_cache_key="one-session") for i in range(6)}
    assert len(seen) == 1
    # completions too: different prompts, one key
    engines = set()
    for i in range(6):
        body = {"model": "coder", "prompt": f"text {i}", "max_tokens": 2, "user": "one-user"}
        answer = httpx.post(srv.url + "/v1/completions", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        engines.add(answer.headers["X-CoderAI-Engine"])
    assert len(engines) == 1


def test_round_robin_set_live_alternates_whatever_the_conversation(srv: Server) -> None:
    with admin(srv) as client:
        changed = client.patch("/admin/api/settings", json={"server.routing": "round_robin"})
        assert changed.status_code == 200, changed.text
        try:
            seen = [ask(srv, "coder", "You are agent 0.", f"again {i}") for i in range(4)]
        finally:
            client.patch("/admin/api/settings", json={"server.routing": "cache_aware"})
    assert seen in (["alpha", "beta"] * 2, ["beta", "alpha"] * 2)


def test_a_request_waiting_on_a_replica_that_dies_is_answered_by_the_other(srv: Server) -> None:
    # slow-coder loads for 3 s: its first request waits inside beta (listed first, and
    # both are idle) while the model loads there
    answered: list[str] = []
    thread = threading.Thread(
        target=lambda: answered.append(ask(srv, "slow-coder", "You are agent 9.", "go"))
    )
    thread.start()

    def beta() -> dict[str, Any]:
        found: dict[str, Any] = next(e for e in srv.health()["engines"] if e["name"] == "beta")
        return found

    wait_for(lambda: "slow-coder" in beta()["loading"])
    assert beta()["in_flight"] == 1
    os.kill(beta()["pid"], signal.SIGKILL)
    thread.join(60)
    assert answered == ["alpha"]
    wait_for(lambda: beta().get("state") == "ready", timeout=60)  # its supervisor restarts it
