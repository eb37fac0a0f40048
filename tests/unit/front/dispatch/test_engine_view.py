"""One view of each engine, whatever asks: the states /healthz, the admin API and /metrics
show come from engine_views alone."""

from __future__ import annotations

from coderai.front.dispatch.engine_view import engine_views
from coderai.front.dispatch.registry import EngineRecord
from coderai.front.engines.host import EngineStatus
from coderai.front.engines.plan import EnginePlan


def plan(name: str) -> EnginePlan:
    return EnginePlan(name=name, backend="cpu", capabilities=("fake",), slots=4)


def record(name: str, draining: bool = False, loaded: tuple[str, ...] = ()) -> EngineRecord:
    out = EngineRecord(f"{name}:1".encode(), name, 1, 100, "cpu", frozenset({"fake"}), 4)
    out.draining, out.loaded = draining, list(loaded)
    return out


def states(records: list[EngineRecord], statuses: dict[str, EngineStatus]) -> dict[str, str]:
    names = ["a", "b", "c", "d"]
    return {v.name: v.state for v in engine_views([plan(n) for n in names], records, statuses)}


def test_states_on_and_off_the_bus() -> None:
    got = states(
        [record("a"), record("b", draining=True)],
        {
            "c": EngineStatus(state="backoff", restarts=3),
            "d": EngineStatus(state="restarting", restarts=1),
        },
    )
    assert got == {"a": "ready", "b": "draining", "c": "backoff", "d": "restarting"}


def test_an_engine_never_started_or_stopped() -> None:
    got = states([], {"a": EngineStatus(), "b": EngineStatus(state="stopped")})
    assert got == {"a": "starting", "b": "dead", "c": "dead", "d": "dead"}


def test_an_engine_on_the_bus_shows_its_credit_and_process() -> None:
    busy = record("a", loaded=("m",))
    (view, *_) = engine_views([plan("a")], [busy], {})
    assert (view.pid, view.free_slots, view.in_flight, view.loaded_models) == (100, 4, 0, ("m",))
    assert view.serving
    assert "pid" in view.public()
    (off,) = engine_views([plan("b")], [], {})
    assert "pid" not in off.public() and not off.serving
