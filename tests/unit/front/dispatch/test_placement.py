from __future__ import annotations

from coderai.front.dispatch.placement import (
    Candidate,
    EngineAbility,
    ModelView,
    assign_owners,
    route,
)

BOTH = frozenset({"transformers", "gguf"})
GGUF = frozenset({"gguf"})


def engine(name: str, caps: tuple[str, ...] = ("gguf",), slots: int = 2, busy: int = 0,
           loaded: tuple[str, ...] = ()) -> Candidate:  # fmt: skip
    return Candidate(name, frozenset(caps), frozenset(loaded), slots - busy, len(loaded))


def model(model_id: str, capability: str | None = "gguf", pin: str | None = None,
          key: str | None = None) -> ModelView:  # fmt: skip
    return ModelView(model_id, key or model_id, capability, pin)


NVIDIA_RADEON = [EngineAbility("nvidia", BOTH), EngineAbility("radeon", GGUF)]


# -- ownership -------------------------------------------------------------------------------
def test_unpinned_models_are_balanced_over_compatible_engines() -> None:
    models = [model("a"), model("b"), model("c"), model("d")]
    owners = assign_owners(models, NVIDIA_RADEON, None).owners
    assert owners == {"a": "nvidia", "b": "radeon", "c": "nvidia", "d": "radeon"}


def test_transformers_models_only_go_to_transformers_engines() -> None:
    models = [model("t1", "transformers"), model("t2", "transformers"), model("g")]
    owners = assign_owners(models, NVIDIA_RADEON, None).owners
    assert owners == {"t1": "nvidia", "t2": "nvidia", "g": "radeon"}


def test_a_pin_decides_the_owner() -> None:
    owners = assign_owners([model("a", pin="radeon")], NVIDIA_RADEON, "nvidia").owners
    assert owners == {"a": "radeon"}


def test_the_default_engine_owns_unpinned_models_it_can_run() -> None:
    models = [model("a"), model("b"), model("t", "transformers")]
    owners = assign_owners(models, NVIDIA_RADEON, "radeon").owners
    assert owners == {"a": "radeon", "b": "radeon", "t": "nvidia"}


def test_a_pin_to_an_unknown_engine_is_reported_and_falls_back() -> None:
    result = assign_owners([model("a", pin="amd")], NVIDIA_RADEON, None)
    assert result.owners == {"a": "nvidia"}
    assert "'amd' does not exist" in result.warnings["a"]


def test_a_pin_to_an_engine_that_cannot_run_the_format_is_reported() -> None:
    result = assign_owners([model("t", "transformers", pin="radeon")], NVIDIA_RADEON, None)
    assert result.owners == {"t": "nvidia"}
    assert "cannot run transformers" in result.warnings["t"]


def test_aliases_sharing_a_path_get_one_owner() -> None:
    models = [model("a", key="/m.gguf"), model("b", key="/m.gguf"), model("c")]
    owners = assign_owners(models, NVIDIA_RADEON, None).owners
    assert owners == {"/m.gguf": "nvidia", "c": "radeon"}


def test_distinct_aliases_of_one_file_may_live_on_two_engines() -> None:
    models = [model("a", key="fast"), model("b", key="long-context")]
    assert assign_owners(models, NVIDIA_RADEON, None).owners == {
        "fast": "nvidia",
        "long-context": "radeon",
    }


def test_models_after_a_pinned_one_and_an_unrunnable_one_are_still_placed() -> None:
    models = [model("p", pin="radeon"), model("x", "fake"), model("a"), model("b")]
    result = assign_owners(models, NVIDIA_RADEON, None)
    # the pin counts toward its engine's load: the next goes to the other one, and on a
    # tie the first able engine takes it
    assert result.owners == {"p": "radeon", "a": "nvidia", "b": "nvidia"}
    assert result.warnings == {"x": "no engine can run fake models"}


def test_a_pin_to_a_missing_engine_names_the_engines_there_are() -> None:
    result = assign_owners([model("a", pin="amd")], NVIDIA_RADEON, None)
    assert result.warnings["a"] == "pinned engine 'amd' does not exist (engines: nvidia, radeon)"
    alone = assign_owners([model("a", pin="amd")], [], None)
    assert alone.warnings["a"] == "pinned engine 'amd' does not exist (engines: none)"


def test_a_model_no_engine_can_run_has_no_owner_and_a_warning() -> None:
    result = assign_owners([model("x", "fake")], NVIDIA_RADEON, None)
    assert result.owners == {}
    assert "no engine" in result.warnings["x"]


def test_one_cpu_engine_owns_everything() -> None:
    models = [model("a"), model("t", "transformers")]
    owners = assign_owners(models, [EngineAbility("engine-0", BOTH)], None).owners
    assert owners == {"a": "engine-0", "t": "engine-0"}


# -- request-time routing ----------------------------------------------------------------------
def test_the_owner_serves_even_when_busy() -> None:
    engines = [engine("a", busy=2), engine("b")]
    chosen = route("gguf", "m", "a", None, engines)
    assert chosen is not None and chosen.name == "a"


def test_an_owner_that_is_down_falls_back_to_an_engine_holding_the_model() -> None:
    engines = [engine("b"), engine("c", loaded=("m",))]
    chosen = route("gguf", "m", "a", "b", engines)
    assert chosen is not None and chosen.name == "c"


def test_then_the_default_engine() -> None:
    engines = [engine("b", busy=1), engine("c")]
    chosen = route("gguf", "m", None, "b", engines)
    assert chosen is not None and chosen.name == "b"


def test_then_the_least_loaded() -> None:
    engines = [engine("b", busy=1), engine("c")]
    chosen = route("gguf", "m", None, None, engines)
    assert chosen is not None and chosen.name == "c"


def test_an_owner_that_cannot_run_the_format_is_skipped() -> None:
    engines = [engine("a", caps=("transformers",)), engine("b")]
    chosen = route("gguf", "m", "a", None, engines)
    assert chosen is not None and chosen.name == "b"


def test_no_compatible_engine_gives_none() -> None:
    assert route("transformers", "m", None, None, [engine("a")]) is None
