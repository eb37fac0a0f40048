"""A node as its head sees it: HELLO and HEARTBEAT built from its own engines."""

from __future__ import annotations

import pytest

from coderai.bus.checker import offered_models
from coderai.bus.kinds import EngineState, FailKind
from coderai.errors import BusProtocolError, ContextLengthExceeded, InvalidRequest, NoEngine
from coderai.front.cluster import node
from coderai.front.dispatch.engine_view import EngineView
from coderai.front.engines.plan import EnginePlan


def view(name: str, state: str = "ready", **kw: object) -> EngineView:
    return EngineView(name=name, backend="cpu", capabilities=("fake",), gpus=(), slots=4,
                      state=state, **kw)  # type: ignore[arg-type]  # fmt: skip


def test_hello_joins_capabilities_sums_slots_and_lists_cards() -> None:
    plans = [EnginePlan("a", "nvidia", ("gguf",), 8, ("GPU-1",)),
             EnginePlan("b", "cpu", ("fake", "gguf"), 2)]  # fmt: skip
    hello = node.hello("box", 7, 42, plans, [{"id": "m", "format": "gguf", "alias": None}])
    assert (hello.name, hello.epoch, hello.backend) == ("box", 7, "node")
    assert (hello.capabilities, hello.slots, hello.gpus) == (["fake", "gguf"], 10, ["GPU-1"])
    assert offered_models(hello.models) == hello.models


def test_the_heartbeat_merges_what_serving_engines_report() -> None:
    gpu = {"GPU-1": {"vendor": "nvidia", "temp": 50, "vram_total_mb": 100, "vram_used_mb": 5}}
    views = [
        view("a", loaded_models=("m1",), rss=100, models={"m1": {"running": 2}},
             gpu_readings=gpu),
        view("b", loaded_models=("m1", "m2"), rss=50, loading={"m3": 0.25},
             models={"m1": {"running": 1, "waiting": 3}}),
        view("c", state="dead", loaded_models=("gone",)),
    ]  # fmt: skip
    beat = node.heartbeat(views, front_rss=10)
    assert (beat.state, beat.loaded, beat.loading) == (
        EngineState.READY,
        ["m1", "m2"],
        {"m3": 0.25},
    )
    assert beat.models == {"m1": {"running": 3, "waiting": 3}}
    assert (beat.rss, beat.gpus, beat.cooldown) == (160, gpu, None)


def test_a_node_cools_only_when_every_serving_engine_does() -> None:
    hot = {"sensor": "gpu", "since": 1.0}
    assert node.heartbeat([view("a", "cooling", cooldown=hot), view("b")], 0).cooldown is None
    assert node.heartbeat([view("a", "cooling", cooldown=hot)], 0).cooldown == hot


@pytest.mark.parametrize(
    ("error", "kind"),
    [(ContextLengthExceeded("long"), FailKind.CONTEXT_LENGTH),
     (InvalidRequest("bad"), FailKind.BAD_REQUEST),
     (NoEngine("none"), FailKind.MODEL_ERROR)],
)  # fmt: skip
def test_a_failure_keeps_its_kind_for_the_head(error: Exception, kind: FailKind) -> None:
    fail = node.fail_of(9, error)  # type: ignore[arg-type]
    assert (fail.job_id, fail.kind, fail.message) == (9, kind, str(error))


@pytest.mark.parametrize(
    "models",
    [{"id": "x"}, [{"id": "", "format": "fake"}], [{"id": "x", "format": "exe"}],
     [{"id": "x", "format": "fake", "alias": 3}], ["x"], [{"id": "x" * 257, "format": "fake"}],
     [{"id": f"m{i}", "format": "fake"} for i in range(1025)]],
)  # fmt: skip
def test_malformed_offers_are_refused(models: object) -> None:
    with pytest.raises(BusProtocolError):
        offered_models(models)
