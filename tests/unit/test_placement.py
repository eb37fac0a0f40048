from __future__ import annotations

from coderai.front.placement import choose_engine
from coderai.front.registry import EngineRecord


def engine(name: str, caps: tuple[str, ...] = ("fake",), slots: int = 2, busy: int = 0,
           loaded: tuple[str, ...] = ()) -> EngineRecord:  # fmt: skip
    record = EngineRecord(name.encode(), name, 1, 1, "cpu", frozenset(caps), slots)
    record.jobs = {i: None for i in range(busy)}  # type: ignore[misc]
    record.loaded = list(loaded)
    return record


def test_only_engines_that_run_the_format_are_chosen() -> None:
    engines = [engine("a", ("gguf",)), engine("b", ("fake",))]
    chosen = choose_engine("fake", "m", None, None, engines)
    assert chosen is not None and chosen.name == "b"


def test_no_compatible_engine_gives_none() -> None:
    assert choose_engine("transformers", "m", None, None, [engine("a", ("gguf",))]) is None


def test_pin_wins_over_load() -> None:
    engines = [engine("a"), engine("b", busy=1)]
    chosen = choose_engine("fake", "m", "b", None, engines)
    assert chosen is not None and chosen.name == "b"


def test_a_full_pinned_engine_means_wait() -> None:
    engines = [engine("a"), engine("b", busy=2)]
    assert choose_engine("fake", "m", "b", None, engines) is None


def test_a_pin_that_cannot_run_the_format_is_ignored() -> None:
    engines = [engine("a"), engine("b", ("gguf",))]
    chosen = choose_engine("fake", "m", "b", None, engines)
    assert chosen is not None and chosen.name == "a"


def test_resident_model_beats_default_engine() -> None:
    engines = [engine("a"), engine("b", loaded=("m",))]
    chosen = choose_engine("fake", "m", None, "a", engines)
    assert chosen is not None and chosen.name == "b"


def test_default_engine_beats_least_loaded() -> None:
    engines = [engine("a", busy=1), engine("b")]
    chosen = choose_engine("fake", "m", None, "a", engines)
    assert chosen is not None and chosen.name == "a"


def test_least_loaded_otherwise() -> None:
    engines = [engine("a", busy=1), engine("b")]
    chosen = choose_engine("fake", "m", None, None, engines)
    assert chosen is not None and chosen.name == "b"


def test_all_full_gives_none() -> None:
    assert choose_engine("fake", "m", None, None, [engine("a", busy=2)]) is None
