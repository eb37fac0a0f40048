from __future__ import annotations

from coderai.engine.eviction import ResidentView, plan_evictions


def view(name: str, size: int, last_used: float, busy: bool = False) -> ResidentView:
    return ResidentView(name, size, busy, last_used)


def test_nothing_is_unloaded_when_the_load_fits() -> None:
    assert plan_evictions([view("a", 10, 1)], needed=5, free=5) == []


def test_least_recently_used_idle_models_go_first() -> None:
    residents = [view("new", 10, 3), view("old", 10, 1), view("mid", 10, 2)]
    assert plan_evictions(residents, needed=15, free=0) == ["old", "mid"]


def test_a_generating_model_is_never_unloaded() -> None:
    residents = [view("busy", 100, 0, busy=True), view("idle", 10, 5)]
    assert plan_evictions(residents, needed=50, free=0) == ["idle"]


def test_no_idle_model_means_nothing_to_unload() -> None:
    assert plan_evictions([view("busy", 10, 0, busy=True)], needed=50, free=0) == []
