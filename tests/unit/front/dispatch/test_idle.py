"""Idle unload, decided by the front: a model idle for its keep_alive goes; one kept
loaded, with keep_alive -1, running, with a job on its way or one queued never does; an
unload asked for is not asked again until its engine has had time to report it gone."""

from __future__ import annotations

from typing import Any

from coderai.bus.messages import Job
from coderai.catalogue.entries import ModelEntry
from coderai.front.dispatch.idle import IdleKeeper, schedule
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.registry import EngineRecord

# a model kept loaded has keep_alive -1 (ModelDirectory.keep_alive_of)
KEEP = {"a": 10.0, "b": 10.0, "never": -1.0, "kept": -1.0, "queued": 10.0, "sent": 10.0}


def engine(name: str, residents: list[dict[str, Any]], at: float = 100.0) -> EngineRecord:
    record = EngineRecord(name.encode(), name, 1, 1, "cpu", frozenset({"fake"}), 8)
    record.residents, record.residents_at = residents, at
    return record


def resident(model: str, idle_for: float, busy: bool = False, kept: bool = False) -> dict[str, Any]:
    return {"model": model, "mb": 10, "busy": busy, "idle_for": idle_for, "kept": kept}


def keep_alive(model: str) -> float:
    return KEEP[model]


def test_each_models_unload_is_its_last_use_plus_its_keep_alive_on_the_fronts_clock() -> None:
    e = engine("e", [resident("a", 4.0), resident("never", 50.0), resident("kept", 50.0, kept=True),
                     resident("b", 1.0, busy=True)])  # fmt: skip
    due, shown = schedule([e], keep_alive, lambda model: False)
    assert shown == {"e": {"a": 106.0, "never": None, "kept": None, "b": None}}
    assert [(d.model, d.at) for d in due] == [("a", 106.0)]


def test_a_model_with_a_job_on_its_engine_or_in_the_queue_is_in_use() -> None:
    e = engine("e", [resident("queued", 50.0), resident("sent", 50.0)])
    entry = ModelEntry(id="sent", format="fake")
    e.jobs[7] = FrontJob(7, entry, "fake", Job(7, entry.spec("fake"), "completion", "p"))
    due, shown = schedule([e], keep_alive, lambda model: model == "queued")
    assert due == [] and shown == {"e": {"queued": None, "sent": None}}


def test_of_several_instances_the_last_used_decides_and_one_running_keeps_them_all() -> None:
    e = engine("e", [resident("a", 8.0), resident("a", 2.0), resident("b", 9.0),
                     resident("b", 0.0, busy=True)])  # fmt: skip
    _, shown = schedule([e], keep_alive, lambda model: False)
    assert shown == {"e": {"a": 108.0, "b": None}}


def test_an_unload_is_asked_once_then_again_only_if_the_model_stayed() -> None:
    keeper = IdleKeeper()
    e = engine("e", [resident("a", 20.0), resident("b", 5.0)])

    def sweep(now: float) -> list[str]:
        return [m for _, m in keeper.sweep([e], keep_alive, lambda m: False, now, 3.0)]

    assert sweep(100.0) == ["a"]  # b is due at 105
    assert sweep(101.0) == []  # asked; its engine has not reported yet
    assert sweep(105.0) == ["a", "b"]  # a stayed (its engine found it busy): asked again
    assert keeper.unloads_at(1_000.0, 105.0) == {"e": {"a": 985.0, "b": 1_000.0}}
    # an engine that left: what was asked of it is forgotten
    assert keeper.sweep([], keep_alive, lambda m: False, 106.0, 3.0) == []
    assert keeper.asked == {}


def test_a_job_that_ended_after_the_last_heartbeat_counts_as_a_use() -> None:
    keeper = IdleKeeper()
    e = engine("e", [resident("a", 9.5)])  # last used at 90.5 by this report: due at 100.5
    keeper.used(e, "a", 99.0)  # a short job ended since, before the next report
    assert keeper.sweep([e], keep_alive, lambda m: False, 100.6, 3.0) == []
    assert keeper.schedule == {"e": {"a": 109.0}}
    # an engine that left takes what was known of it along
    keeper.sweep([], keep_alive, lambda m: False, 101.0, 3.0)
    assert keeper.ended == {}
