from __future__ import annotations

import threading

from coderai.bus.messages import ModelSpec
from coderai.common.eviction import ResidentView, plan_evictions
from coderai.engine.backends.fake import FakeBackend
from coderai.engine.pool import ModelPool, still_to_load


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


def test_a_load_in_flight_counts_for_what_it_has_yet_to_take() -> None:
    mib = 1 << 20
    assert still_to_load((0, 0), 500 * mib) == 0  # nothing loading
    assert still_to_load((300 * mib, 100 * mib), 100 * mib) == 300 * mib  # not begun
    assert still_to_load((300 * mib, 100 * mib), 250 * mib) == 150 * mib  # half in RSS
    assert still_to_load((300 * mib, 100 * mib), 450 * mib) == 0  # all in, and more
    assert still_to_load((300 * mib, 100 * mib), 80 * mib) == 300 * mib  # it shrank


def test_an_unload_during_a_load_is_not_counted_as_the_loads_progress() -> None:
    loaded = threading.Event()
    pool = ModelPool({"fake": FakeBackend()}, lambda key: loaded.set())
    try:
        small = ModelSpec("small", "", "fake", {"memory_mb": 8})
        assert pool.acquire(small) is None  # its load starts
        assert loaded.wait(10)
        pool.finish_load(small.key())
        slow = ModelSpec("slow", "", "fake", {"memory_mb": 1, "load_seconds": 2})
        assert pool.acquire(slow) is None
        (size, start), before = pool.room_state[1], pool.loading[slow.key()].rss_at_start
        assert size == 1 << 20 and start == before
        assert pool.unload("small") == 1  # 8 MiB go back while "slow" loads
        after = pool.loading[slow.key()].rss_at_start
        assert after == before - (8 << 20)  # the baseline moves down with the unload
        assert pool.room_state[1] == (1 << 20, after)  # and the heartbeat's pair with it
    finally:
        pool.close()
