"""One host-RAM cap for the fleet, with real processes whose fake models really take their
memory: a load that needs room unloads the fleet's least recently used idle model on
whichever engine holds it, never one that is generating; a load that can never fit is a
503 naming the cap."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psutil
import pytest

from tests.support.server import Server, serving, wait_for
from tests.support.sse import BackgroundChat, is_error

KEY = "ram-admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MIB = 1 << 20
#: each model's weights: large beside the processes' own RSS, so the figures are clear
MODEL_MB = 300
ENGINES = [{"name": n, "backend": "cpu", "capabilities": ["fake"]} for n in ("a", "b", "c")]
SLOW = {"tokens_per_second": 20, "output_tokens": 10_000}
MODELS: list[dict[str, Any]] = [
    {"id": f"on-{n}", "format": "fake", "engine": n, "options": {"memory_mb": MODEL_MB}}
    for n in ("a", "b", "c")
] + [
    {"id": "slow-a", "format": "fake", "engine": "a", "options": {"memory_mb": MODEL_MB, **SLOW}},
    {"id": "huge", "format": "fake", "engine": "c", "options": {"memory_mb": 100_000}},
    # its memory is taken at once, then the load goes on for many heartbeats
    {"id": "long-load-b", "format": "fake", "engine": "b",
     "options": {"memory_mb": MODEL_MB, "load_seconds": 2}},
]  # fmt: skip


@pytest.fixture
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    config = {"engine_specs": ENGINES, "heartbeat_interval": 0.2, "queue_timeout": 20}
    with serving(tmp_path_factory.mktemp("ram"), config, MODELS, 3, KEY) as server:
        yield server


def fleet_rss(srv: Server) -> int:
    front = psutil.Process(srv.proc.pid)
    return sum(p.memory_info().rss for p in [front, *front.children(recursive=True)])


def loaded(srv: Server) -> dict[str, list[str]]:
    return {e["name"]: e["loaded_models"] for e in srv.health()["engines"]}


def chat(srv: Server, model: str) -> httpx.Response:
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60)


def settle(cond: Callable[[], bool]) -> None:
    """Wait for what loads, unloads and a few heartbeats bring about."""
    wait_for(cond, timeout=30)


def set_cap(srv: Server, gb: float) -> None:
    answer = httpx.patch(srv.url + "/admin/api/settings", headers=AUTH,
                         json={"offload.max_ram_gb": gb})  # fmt: skip
    assert answer.json()["applied"] == ["offload.max_ram_gb"], answer.text


def cap_for_two_models(srv: Server) -> float:
    """A cap (GiB) that holds the fleet as it is now plus two models and a half."""
    cap_gb = (fleet_rss(srv) + 2.5 * MODEL_MB * MIB) / (1 << 30)
    set_cap(srv, cap_gb)
    return cap_gb


@pytest.mark.timeout(120)
def test_a_third_model_unloads_the_fleets_least_recently_used_idle_one(srv: Server) -> None:
    cap = cap_for_two_models(srv) * (1 << 30)
    assert chat(srv, "on-a").status_code == 200
    assert chat(srv, "on-b").status_code == 200  # used last: a is the LRU model
    settle(lambda: loaded(srv) == {"a": ["on-a"], "b": ["on-b"], "c": []})
    assert fleet_rss(srv) <= cap
    answer = chat(srv, "on-c")  # waits for room made on another engine, then serves
    assert answer.status_code == 200, answer.text
    settle(lambda: loaded(srv) == {"a": [], "b": ["on-b"], "c": ["on-c"]})
    settle(lambda: fleet_rss(srv) <= cap)


@pytest.mark.timeout(120)
def test_a_model_that_is_generating_is_never_unloaded_for_room(srv: Server) -> None:
    cap_for_two_models(srv)
    assert chat(srv, "on-b").status_code == 200  # b is used first: the LRU idle model
    generating = BackgroundChat(srv.url, "slow-a")
    wait_for(lambda: len(generating.events) > 5)  # slow-a generates on a
    answer = chat(srv, "on-c")
    assert answer.status_code == 200, answer.text
    settle(lambda: loaded(srv) == {"a": ["slow-a"], "b": [], "c": ["on-c"]})
    streamed = len(generating.events)
    wait_for(lambda: len(generating.events) > streamed + 5)  # the stream never stopped
    assert not any(is_error(e) for e in generating.events)
    generating.stop()


def test_a_load_in_flight_is_not_counted_twice_against_the_cap(srv: Server) -> None:
    # while long-load-b loads, b's RSS already holds it; were its whole size counted again
    # as still to come, the fleet would seem 150 MiB over the cap for ten heartbeats, and
    # the front would unload on-a for room that is there
    cap_for_two_models(srv)
    assert chat(srv, "on-a").status_code == 200
    assert chat(srv, "long-load-b").status_code == 200
    settle(lambda: loaded(srv)["b"] == ["long-load-b"])
    assert loaded(srv) == {"a": ["on-a"], "b": ["long-load-b"], "c": []}
    assert "to make room under the RAM cap" not in srv.log()


def test_a_load_that_can_never_fit_is_a_503_naming_the_cap(srv: Server) -> None:
    cap_for_two_models(srv)
    answer = chat(srv, "huge")
    assert answer.status_code == 503
    message = answer.json()["error"]["message"]
    assert "offload.max_ram_gb" in message and "more than the cap itself" in message
    assert "huge" in message


def test_a_fleet_over_its_cap_unloads_idle_models_until_it_fits(srv: Server) -> None:
    assert chat(srv, "on-a").status_code == 200
    assert chat(srv, "on-b").status_code == 200
    settle(lambda: loaded(srv) == {"a": ["on-a"], "b": ["on-b"], "c": []})
    cap = fleet_rss(srv) - MODEL_MB * MIB // 2
    set_cap(srv, cap / (1 << 30))  # under what the fleet holds now
    settle(lambda: fleet_rss(srv) <= cap)
    settle(lambda: loaded(srv)["a"] == [] or loaded(srv)["b"] == [])
