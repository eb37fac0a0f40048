"""Room under the fleet's RAM cap, decided by the front for the whole fleet: the least
recently used idle models go (judged on the front's clock, not on raw idle_for values
reported at different times), the shortfall is counted once however many engines report
it, and nothing more is asked until the unloads are seen done and every engine has
measured again."""

from __future__ import annotations

from typing import Any

from coderai.front.registry import EngineRecord
from coderai.front.room import RoomKeeper, room_evictions


def engine(
    name: str,
    residents: list[dict[str, Any]],
    *,
    at: float = 100.0,
    room: float | None = 0.0,
    wants: float = 0.0,
    beats: int = 10,
) -> EngineRecord:
    record = EngineRecord(name.encode(), name, 1, 1, "cpu", frozenset({"fake"}), 1)
    record.residents, record.residents_at = residents, at
    record.room_mb, record.wants_mb, record.beats = room, wants, beats
    return record


def idle(model: str, idle_for: float, mb: float = 300) -> dict[str, Any]:
    return {"model": model, "mb": mb, "busy": False, "idle_for": idle_for}


def test_idle_times_are_compared_on_the_fronts_clock() -> None:
    # a's report is 0.5 s older than b's: a's model was last used at 99.5 - 1.0 = 98.5,
    # b's at 100.0 - 1.2 = 98.8; raw idle_for values (1.0 against 1.2) would pick b's
    a = engine("a", [idle("on-a", 1.0)], at=99.5)
    b = engine("b", [idle("on-b", 1.2)], at=100.0)
    c = engine("c", [], wants=300)
    assert room_evictions([a, b, c]) == [("a", "on-a")]


def test_a_shortfall_seen_by_every_engine_is_made_up_once() -> None:
    # three engines measure the same fleet 100 MiB over its cap: one 300 MiB model goes
    engines = [engine(n, [idle(f"on-{n}", i)], room=-100) for i, n in enumerate("abc")]
    assert room_evictions(engines) == [("c", "on-c")]


def test_the_room_counted_is_the_smallest_any_engine_sees() -> None:
    # b counts its own load in flight, so it sees less room than a: 250 wanted, 100 free
    a = engine("a", [idle("old", 9), idle("new", 1)], room=200, wants=250)
    b = engine("b", [], room=100)
    assert room_evictions([a, b]) == [("a", "old")]
    # with enough room, or no cap anywhere, nothing goes
    assert room_evictions([engine("a", [idle("m", 1)], room=400, wants=250)]) == []
    assert room_evictions([engine("a", [idle("m", 1)], room=None, wants=250)]) == []


def test_a_busy_model_never_goes() -> None:
    busy = {"model": "busy", "mb": 300, "busy": True, "idle_for": 0.0}
    assert room_evictions([engine("a", [busy, idle("m", 1)], room=-500)]) == [("a", "m")]


def test_nothing_more_is_asked_until_unloads_land_and_every_engine_beats_twice() -> None:
    keeper = RoomKeeper()
    a = engine("a", [idle("on-a", 5)])
    b = engine("b", [], wants=300)
    assert keeper.sweep([a, b]) == []  # the first look waits two beats of everyone
    a.beats += 2
    b.beats += 2
    assert keeper.sweep([a, b]) == [("a", "on-a")]
    # b's next reports still want room (measured before the unload landed): not asked again
    a.beats += 5
    b.beats += 5
    assert keeper.sweep([a, b]) == []
    a.residents = []  # the unload is seen done
    assert keeper.sweep([a, b]) == []
    a.beats += 2
    b.beats += 1
    assert keeper.sweep([a, b]) == []  # b has not measured twice since
    b.beats += 1
    a.residents = [idle("other", 1)]
    assert keeper.sweep([a, b]) == [("a", "other")]  # it still wants: the next one goes


def test_an_engine_that_left_does_not_hold_the_keeper_back() -> None:
    keeper = RoomKeeper()
    a = engine("a", [idle("on-a", 5)], beats=0)
    b = engine("b", [], wants=300, beats=0)
    keeper.sweep([a, b])
    a.beats = b.beats = 2
    assert keeper.sweep([a, b]) == [("a", "on-a")]
    # a is gone before its unload was seen: its pending unload is forgotten, and b, which
    # still wants room, has its own idle model go once it has measured twice more
    b.residents, b.beats = [idle("on-b", 1)], 4
    assert keeper.sweep([b]) == []
    b.beats = 6
    assert keeper.sweep([b]) == [("b", "on-b")]
