"""Model pool rules of one engine, observed through the front with fake models."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from tests.integration.conftest import StartServer
from tests.support.server import Server, wait_for
from tests.support.sse import DONE, content, event

QUICK = {"heartbeat_interval": 0.2}


def fake(model_id: str, **options: Any) -> dict[str, Any]:
    return {"id": model_id, "format": "fake", "options": options}


def ask(srv: Server, model: str, tokens: int = 3) -> httpx.Response:
    body = {"model": model, "prompt": "x", "max_tokens": tokens}
    return httpx.post(srv.url + "/v1/completions", json=body, timeout=30)


def loaded(srv: Server) -> list[str]:
    return list(srv.health()["engines"][0]["loaded_models"])


def streamed(r: httpx.Response) -> Iterator[dict[str, Any]]:
    """A completion stream's events, as they come."""
    return (e for line in r.iter_lines() if (e := event(line)) is not None)


def test_idle_models_are_unloaded_least_recently_used_first(start_server: StartServer) -> None:
    models = [fake("a", memory_mb=40), fake("b", memory_mb=40), fake("c", memory_mb=40)]
    # a budget for two of the three
    srv = start_server(QUICK, models, models_config={"memory_budget_mb": 100})
    for name in ("a", "b"):
        assert ask(srv, name).status_code == 200
    wait_for(lambda: loaded(srv) == ["a", "b"])
    assert ask(srv, "a").status_code == 200  # a is now more recent than b
    assert ask(srv, "c").status_code == 200
    wait_for(lambda: loaded(srv) == ["a", "c"])


def test_a_generating_model_is_never_unloaded(start_server: StartServer) -> None:
    models = [fake("busy", memory_mb=80, tokens_per_second=20), fake("other", memory_mb=80)]
    srv = start_server(QUICK, models, models_config={"memory_budget_mb": 100})
    body = {"model": "busy", "prompt": "x", "max_tokens": 20, "stream": True}
    with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=30) as r:
        evs = streamed(r)
        next(e for e in evs if content([e]))
        assert ask(srv, "other").status_code == 200  # loads beside it, over budget
        wait_for(lambda: loaded(srv) == ["busy", "other"])
        rest = list(evs)
    assert rest[-1] is DONE


def _overlap(srv: Server, model: str) -> bool:
    """Whether two streams of one model ran at the same time. Each lasts about 2 s (40
    tokens at 20/s); back to back, the second's first token and the first's end arrive
    together, so only an overlap of over 0.2 s counts. The second request is sent only
    once the first has begun, and the test fails unless it was sent well before the first
    ended: a second request that is merely late cannot pass for one that waited."""
    body = {"model": model, "prompt": "x", "max_tokens": 40, "stream": True}
    spans: dict[int, tuple[float, float, float]] = {}  # sent, first token, end
    begun = threading.Event()

    def one(i: int) -> None:
        sent = time.monotonic()
        with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=30) as r:
            first = None
            for e in streamed(r):
                if content([e]) and first is None:
                    first = time.monotonic()
                    begun.set()
            assert first is not None
            spans[i] = (sent, first, time.monotonic())

    threads = [threading.Thread(target=one, args=(0,))]
    threads[0].start()
    assert begun.wait(20)
    threads.append(threading.Thread(target=one, args=(1,)))
    threads[1].start()
    for t in threads:
        t.join()
    (_, _, first_end), (second_sent, second_first, _) = spans[0], spans[1]
    assert second_sent < first_end - 1.0, "the second request was sent too late to tell"
    return second_first < first_end - 0.2


def test_one_single_sequence_instance_serves_requests_one_after_another(
    start_server: StartServer,
) -> None:
    srv = start_server(QUICK, [fake("solo", capacity=1, tokens_per_second=20)])
    assert not _overlap(srv, "solo")


def test_max_model_instances_lets_requests_run_in_parallel(start_server: StartServer) -> None:
    models = [fake("duo", capacity=1, tokens_per_second=20)]
    srv = start_server(QUICK, models, models_config={"max_model_instances": 2})
    assert _overlap(srv, "duo")


def test_overrides_are_resolved_per_engine(start_server: StartServer) -> None:
    models = [fake("duo", capacity=1, tokens_per_second=20)]
    srv = start_server(
        QUICK, models, models_config={"max_model_instances": 2,
                                   "max_model_instances_overrides": {"engine-0": 1}},
    )  # fmt: skip
    assert not _overlap(srv, "duo")


def test_load_mode_load_loads_at_start_and_reports_progress(start_server: StartServer) -> None:
    models = [{**fake("eager", load_seconds=1.5), "load_mode": "load"}, fake("lazy")]
    srv = start_server(QUICK, models)
    seen: list[dict[str, Any]] = []

    def loading() -> bool:
        seen.append(srv.health()["engines"][0])
        return bool(seen[-1]["loading"])

    wait_for(loading)
    assert seen[-1]["state"] == "loading"
    assert 0.0 <= seen[-1]["loading"]["eager"] < 1.0
    wait_for(lambda: loaded(srv) == ["eager"])
    assert "lazy" not in loaded(srv)
    assert "loading model eager" in srv.log()


def test_a_model_idle_past_its_keep_alive_is_unloaded_and_healthz_says_when(
    start_server: StartServer,
) -> None:
    models = [
        fake("brief"),  # the default, models.keep_alive: 1 s
        {**fake("stays"), "keep_alive": -1},
        {**fake("kept"), "keep_loaded": True},
    ]
    srv = start_server(QUICK, models, models_config={"keep_alive": 1})
    before = time.time()
    for name in ("brief", "stays", "kept"):
        assert ask(srv, name).status_code == 200

    def unloads() -> dict[str, Any]:
        shown: dict[str, Any] = srv.health()["engines"][0]["unloads"]
        return shown

    wait_for(lambda: set(unloads()) == {"brief", "stays", "kept"})
    shown = unloads()
    assert shown["stays"] is None and shown["kept"] is None
    assert before + 1 <= shown["brief"] <= time.time() + 1
    # gone after its keep_alive (and a heartbeat or two); the others stay
    wait_for(lambda: loaded(srv) == ["kept", "stays"], timeout=15)
    assert "unloading brief on" in srv.log()


def test_a_model_kept_loaded_is_never_unloaded_to_make_room(start_server: StartServer) -> None:
    models = [
        {**fake("kept", memory_mb=40), "keep_loaded": True},
        fake("b", memory_mb=40),
        fake("c", memory_mb=40),
    ]
    # a budget for two of the three: the least recently used idle model goes, never "kept"
    srv = start_server(QUICK, models, models_config={"memory_budget_mb": 100})
    for name in ("kept", "b"):
        assert ask(srv, name).status_code == 200
    wait_for(lambda: loaded(srv) == ["b", "kept"])
    assert ask(srv, "c").status_code == 200
    wait_for(lambda: loaded(srv) == ["c", "kept"])
