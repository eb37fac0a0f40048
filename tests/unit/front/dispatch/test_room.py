"""Room under the fleet's RAM cap, decided by the front for the whole fleet: the least
recently used idle models go (judged on the front's clock, not on raw idle_for values
reported at different times), the shortfall is counted once however many engines report
it, and nothing more is asked until the unloads are seen done and every engine has
measured again."""

from __future__ import annotations

from typing import Any

from coderai.bus.messages import Job
from coderai.catalogue.entries import ModelEntry
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.registry import EngineRecord
from coderai.front.dispatch.room import RoomKeeper, room_evictions


def engine(
    name: str,
    residents: list[dict[str, Any]],
    *,
    at: float = 100.0,
    room: float | None = 0.0,
    wants: float = 0.0,
    coming: float = 0.0,
    measures: int = 10,
) -> EngineRecord:
    record = EngineRecord(name.encode(), name, 1, 1, "cpu", frozenset({"fake"}), 1)
    record.residents, record.residents_at = residents, at
    record.room_mb, record.wants_mb, record.coming_mb = room, wants, coming
    record.measures = measures
    return record


def idle(model: str, idle_for: float, mb: float = 300) -> dict[str, Any]:
    return {"model": model, "mb": mb, "busy": False, "idle_for": idle_for}


def names(asked: list[tuple[EngineRecord, str]]) -> list[tuple[str, str]]:
    return [(e.name, model) for e, model in asked]


def test_idle_times_are_compared_on_the_fronts_clock() -> None:
    # a's report is 0.5 s older than b's: a's model was last used at 99.5 - 1.0 = 98.5,
    # b's at 100.0 - 1.2 = 98.8; raw idle_for values (1.0 against 1.2) would pick b's
    a = engine("a", [idle("on-a", 1.0)], at=99.5)
    b = engine("b", [idle("on-b", 1.2)], at=100.0)
    c = engine("c", [], wants=300)
    assert names(room_evictions([a, b, c])) == [("a", "on-a")]


def test_a_shortfall_seen_by_every_engine_is_made_up_once() -> None:
    # three engines measure the same fleet 100 MiB over its cap: one 300 MiB model goes
    engines = [engine(n, [idle(f"on-{n}", i)], room=-100) for i, n in enumerate("abc")]
    assert names(room_evictions(engines)) == [("c", "on-c")]


def test_the_room_is_the_smallest_seen_less_every_engines_loads_in_flight() -> None:
    # 250 wanted; a saw 300 free, b 200, but b and c still have 50 MiB each to load
    a = engine("a", [idle("old", 9), idle("new", 1)], room=300, wants=250)
    b = engine("b", [], room=200, coming=50)
    c = engine("c", [], room=250, coming=50)
    assert names(room_evictions([a, b, c])) == [("a", "old")]
    c.coming_mb = 0  # 150 free then, still short
    assert names(room_evictions([a, b, c])) == [("a", "old")]
    b.coming_mb = 0  # 200 free, still short of 250
    assert names(room_evictions([a, b, c])) == [("a", "old")]
    b.room_mb = 250  # 250 free: it fits
    assert room_evictions([a, b, c]) == []
    # without a cap anywhere, nothing goes
    assert room_evictions([engine("a", [idle("m", 1)], room=None, wants=250)]) == []


def test_a_load_is_not_counted_twice_by_another_engines_later_measure() -> None:
    # b reported 300 MiB still to load; c measured after b had taken it: c's room already
    # holds the load, b's own room (measured with its coming) does not
    a = engine("a", [idle("on-a", 1)], room=150)
    b = engine("b", [], room=450, coming=300)
    c = engine("c", [], room=150)
    assert room_evictions([a, b, c]) == []
    b.room_mb = 250  # by b's own measure, 50 MiB short once its load is in: on-a goes
    assert names(room_evictions([a, b, c])) == [("a", "on-a")]


def test_a_busy_model_never_goes_nor_one_with_a_job_on_its_way() -> None:
    busy = {"model": "busy", "mb": 300, "busy": True, "idle_for": 0.0}
    a = engine("a", [busy, idle("m", 1), idle("n", 5)], room=-500)
    assert names(room_evictions([a])) == [("a", "n"), ("a", "m")]
    entry = ModelEntry(id="n", format="fake")
    a.jobs[1] = FrontJob(1, entry, "fake", Job(1, entry.spec("fake"), "completion", "hi"))
    assert names(room_evictions([a])) == [("a", "m")]


def test_a_model_the_catalogue_keeps_loaded_never_goes() -> None:
    a = engine("a", [idle("kept", 9), idle("m", 1)], room=-500)
    assert names(room_evictions([a], kept=lambda model: model == "kept")) == [("a", "m")]


def test_several_instances_of_one_model_are_one_unload() -> None:
    a = engine("a", [idle("m", 1, mb=100), idle("m", 3, mb=100)], room=-150)
    assert names(room_evictions([a])) == [("a", "m")]


def test_a_load_that_cannot_fit_does_not_empty_the_fleet() -> None:
    a = engine("a", [idle("m", 1)], room=100, wants=1000)  # 100 + 300 idle < 1000
    assert room_evictions([a]) == []
    a.room_mb = -50  # but the fleet over its cap still comes back under it
    assert names(room_evictions([a])) == [("a", "m")]


def test_nothing_more_is_asked_until_unloads_land_and_every_engine_measures_twice() -> None:
    keeper = RoomKeeper()
    a = engine("a", [idle("on-a", 5)])
    b = engine("b", [], wants=300)
    assert keeper.sweep([a, b]) == []  # the first look waits two measures of everyone
    a.measures += 2
    b.measures += 2
    assert names(keeper.sweep([a, b])) == [("a", "on-a")]
    # b's next reports still want room (measured before the unload landed): not asked again
    b.measures += 5
    assert keeper.sweep([a, b]) == []
    a.residents = []  # the unload is seen done
    assert keeper.sweep([a, b]) == []
    a.measures += 2
    b.measures += 1
    assert keeper.sweep([a, b]) == []  # b has not measured twice since
    b.measures += 1
    a.residents = [idle("other", 1)]
    assert names(keeper.sweep([a, b])) == [("a", "other")]  # it still wants: the next goes


def test_an_unload_that_never_lands_does_not_stall_the_keeper() -> None:
    keeper = RoomKeeper()
    a = engine("a", [idle("m", 5), idle("n", 1)], measures=0)
    b = engine("b", [], wants=300, measures=0)
    keeper.sweep([a, b])
    a.measures = b.measures = 2
    assert names(keeper.sweep([a, b])) == [("a", "m")]
    # m stays (an instance was busy when the unload came): after two of a's measures it is
    # no longer awaited, and once everyone has measured twice more the keeper goes on
    a.residents = [idle("m", 0.5), idle("n", 1)]
    a.measures = 4
    assert keeper.sweep([a, b]) == []
    a.measures = b.measures = 6
    assert names(keeper.sweep([a, b])) == [("a", "n")]


def test_an_engine_that_left_or_restarted_does_not_hold_the_keeper_back() -> None:
    keeper = RoomKeeper()
    a = engine("a", [idle("on-a", 5)], measures=0)
    b = engine("b", [], wants=300, measures=0)
    keeper.sweep([a, b])
    a.measures = b.measures = 2
    assert names(keeper.sweep([a, b])) == [("a", "on-a")]
    # a restarts (a new incarnation, its residents as they are) before its unload is seen
    a2 = engine("a", [idle("on-a", 9)], measures=0)
    a2.epoch = 2
    b.residents, b.measures = [idle("on-b", 1)], 4
    assert keeper.sweep([a2, b]) == []  # settling: a2 has not measured twice
    a2.measures, b.measures = 2, 6
    assert names(keeper.sweep([a2, b])) == [("a", "on-a")]
