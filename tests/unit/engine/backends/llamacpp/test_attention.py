"""The attention kernel's choice (llamacpp/attention.py): costs fitted from timings, the
cheaper kernel for an agent's turn, the rule where nothing is timed, the report, and the
costs kept per machine (repack.Kernels.kept)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coderai.engine.backends.llamacpp.attention import (
    CHUNK,
    DEPTH,
    LAYERS,
    Attention,
    Choice,
    Costs,
    Shape,
    Turn,
    choice,
    choose,
    fit,
    turn_seconds,
)
from coderai.engine.backends.llamacpp.repack import Kernels

SHAPE = Shape(576, 9, 3, 64)
#: flash attention off: reads dearer per token, steps cheaper per cell (as on a CPU)
OFF = Costs(read=8e-4, read_cell=1.0e-6, step=2.5e-3, step_cell=2.6e-6)
ON = Costs(read=5e-4, read_cell=0.9e-6, step=2.2e-3, step_cell=4.6e-6)


def timings(costs: Costs) -> dict[str, list[tuple[int, float]]]:
    """What the pass would time for these costs, at its depths."""
    depths = range(0, DEPTH + CHUNK, CHUNK)
    chunk = [(d, CHUNK * (costs.read + costs.read_cell * (d + CHUNK / 2))) for d in depths]
    steps = [(d, costs.step + costs.step_cell * d) for d in depths]
    return {"reads": chunk, "steps": steps}


def test_fit_finds_the_costs_its_timings_came_from() -> None:
    fitted = fit(**timings(OFF))
    for name in ("read", "read_cell", "step", "step_cell"):
        assert getattr(fitted, name) == pytest.approx(getattr(OFF, name), rel=1e-9)


def test_fit_counts_slopes_that_noise_made_negative_as_none() -> None:
    flat = fit(reads=[(0, 0.2), (512, 0.1)], steps=[(0, 0.003), (512, 0.002)])
    assert flat.read_cell == 0.0 and flat.step_cell == 0.0
    assert flat.read == pytest.approx(0.15 / CHUNK)  # the line's value at depth 0
    assert flat.step == pytest.approx(0.0025)


def test_the_turn_is_priced_for_the_real_models_layers() -> None:
    turn = Turn(depth=1000, read=100, written=10)
    reading, writing = turn_seconds(OFF, turn, LAYERS * 3)
    assert reading == pytest.approx(3 * 100 * (OFF.read + OFF.read_cell * 1050))
    assert writing == pytest.approx(3 * 10 * (OFF.step + OFF.step_cell * 1105))


def test_deep_turns_keep_flash_attention_off_where_its_steps_cost_more_per_cell() -> None:
    chosen = choose(OFF, ON, Turn.of(32768), 30)
    assert not chosen.flash
    assert sum(chosen.on) > sum(chosen.off)
    assert "16,384 deep" in chosen.why and "writes" in chosen.why and "slower" in chosen.why


def test_flash_attention_is_chosen_where_it_costs_the_turn_less() -> None:
    cheap_steps = Costs(read=ON.read, read_cell=ON.read_cell, step=ON.step, step_cell=1e-6)
    chosen = choose(OFF, cheap_steps, Turn.of(32768), 30)
    assert chosen.flash and sum(chosen.on) < sum(chosen.off)
    assert "reads" in chosen.why and "faster" in chosen.why


def test_a_tie_keeps_it_off() -> None:
    assert not choose(OFF, OFF, Turn.of(8192), 30).flash


def test_the_turn_is_half_the_context_where_that_is_under_16k() -> None:
    assert Turn.of(8192).depth == 4096
    assert Turn.of(131072).depth == 16384


def test_a_fixed_choice_times_nothing_and_a_failed_pass_leaves_it_off() -> None:
    def never(key: str, take: Any) -> dict[str, Any]:
        raise AssertionError("nothing is timed for a fixed choice")

    fixed = Choice(True, "the model entry says so (flash_attn)")
    assert choice(fixed, SHAPE, 30, 8192, never) is fixed

    def failing(key: str, take: Any) -> dict[str, Any]:
        raise RuntimeError("the timed pass did not end within 60 s")

    failed = choice(None, SHAPE, 30, 8192, failing)
    assert not failed.flash and "did not end within 60 s" in failed.why


def test_kept_costs_are_read_back_as_costs() -> None:
    kept = {"off": vars(OFF), "on": vars(ON)}
    assert choice(None, SHAPE, 30, 32768, lambda key, take: kept) == choose(
        OFF, ON, Turn.of(32768), 30
    )


def test_the_report_lists_each_loaded_model_until_its_last_instance_goes() -> None:
    attention = Attention()
    fixed = Choice(False, "a recurrent model: no attention layers to time")
    for _ in range(2):
        attention.decide("m", fixed, SHAPE, 30, 8192, lambda key, take: {})
    assert attention.report() == {"models": {"m": {"on": False, "why": fixed.why}}}
    attention.released("m")
    assert "m" in attention.report()["models"]
    attention.released("m")
    attention.released("never loaded")
    assert attention.report() == {"models": {}}


def test_the_machine_keeps_a_measure_once_taken(tmp_path: Path) -> None:
    kernels = Kernels(folder=tmp_path, key="k")
    taken: list[str] = []

    def take() -> dict[str, Any]:
        taken.append("once")
        return {"off": vars(OFF), "on": vars(ON)}

    first = kernels.kept("attention", SHAPE.key, take)
    again = Kernels(folder=tmp_path, key="k").kept("attention", SHAPE.key, take)
    assert first == again and taken == ["once"]
    other = Shape(896, 14, 2, 64).key
    Kernels(folder=tmp_path, key="k").kept("attention", other, take)
    assert set(json.loads((tmp_path / "attention-k.json").read_text())) == {SHAPE.key, other}


def test_a_measure_that_fails_is_not_kept_and_a_broken_file_is_measured_again(
    tmp_path: Path,
) -> None:
    kernels = Kernels(folder=tmp_path, key="k")

    def fails() -> dict[str, Any]:
        raise RuntimeError("the timed pass failed (exit 1)")

    with pytest.raises(RuntimeError):
        kernels.kept("attention", SHAPE.key, fails)
    assert not (tmp_path / "attention-k.json").exists()
    (tmp_path / "attention-k.json").write_text("{not json")
    assert kernels.kept("attention", SHAPE.key, lambda: {"off": 1}) == {"off": 1}
