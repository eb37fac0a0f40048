"""The attention kernel's choice (llamacpp/attention.py): costs fitted from timings, the
cheaper kernel for an agent's turn, the rule where nothing is timed (where flash attention
pays or is needed, as measured; a model entry's `flash_attn` forces either), the report,
the costs kept per machine (machine.MachineFiles.kept), and the timed pass itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coderai.engine.backends.llamacpp import attention
from coderai.engine.backends.llamacpp.attention import (
    CHUNK,
    DEPTH,
    LAYERS,
    RETRY_SECONDS,
    Attention,
    Choice,
    Costs,
    Shape,
    Turn,
    choose,
    fit,
    kernel_for,
    measure,
    rule,
    turn_seconds,
)
from coderai.engine.backends.llamacpp.machine import MachineFiles

SHAPE = Shape(9, 3, 64)
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


def never(key: str, take: Any, fresh: Any) -> dict[str, Any]:
    raise AssertionError("nothing is timed for a fixed choice")


def test_a_fixed_choice_times_nothing() -> None:
    fixed = Choice(True, "the model entry says so (flash_attn)")
    assert kernel_for(fixed, SHAPE, 30, 8192, never) is fixed


def test_on_the_cpu_a_windowed_model_has_it_and_a_full_attention_one_is_timed() -> None:
    windowed = rule(None, on_gpu=False, quantized=False, windowed=True)
    assert windowed is not None and windowed.flash
    assert rule(None, on_gpu=False, quantized=False, windowed=False) is None


def test_a_gpu_or_a_quantized_cache_turns_it_on() -> None:
    for fixed in (
        rule(None, on_gpu=True, quantized=False, windowed=False),
        rule(None, on_gpu=False, quantized=True, windowed=False),
    ):
        assert fixed is not None and fixed.flash


def test_the_entry_forces_either_and_an_untimeable_model_keeps_it_off() -> None:
    for option in (True, False):
        forced = rule(option, on_gpu=True, quantized=True, windowed=True)
        assert forced is not None and forced.flash is option
        assert "flash_attn" in forced.why
    hybrid = rule(None, on_gpu=False, quantized=False, windowed=False,
                  timeable="a recurrent or hybrid model")  # fmt: skip
    assert hybrid is not None and not hybrid.flash and "not timed" in hybrid.why


def test_a_failed_pass_or_costs_that_cannot_be_read_leave_it_off() -> None:
    def failing(key: str, take: Any, fresh: Any) -> dict[str, Any]:
        return {"failed": "the timed pass did not end within 60 s", "at": 0.0}

    failed = kernel_for(None, SHAPE, 30, 8192, failing)
    assert not failed.flash and "did not end within 60 s" in failed.why
    broken: list[dict[str, Any]] = [
        {"off": vars(OFF)},
        {"off": vars(OFF), "on": {"read": None}},
        {"on": 1},
    ]
    for costs in broken:

        def kept(key: str, take: Any, fresh: Any, costs: dict[str, Any] = costs) -> dict[str, Any]:
            return costs

        unread = kernel_for(None, SHAPE, 30, 8192, kept)
        assert not unread.flash and "cannot be read" in unread.why


def test_a_failure_is_kept_a_day_then_the_pass_is_tried_again(tmp_path: Path) -> None:
    files = MachineFiles(tmp_path, key="k")
    passes: list[str] = []

    def fails(shape: Shape) -> dict[str, Costs]:
        passes.append(shape.key)
        raise RuntimeError("the timed pass did not end within 60 s")

    patch = pytest.MonkeyPatch()
    patch.setattr(attention, "measure", fails)
    try:
        first = kernel_for(None, SHAPE, 30, 8192, lambda k, t, f: files.kept("attention", k, t, f))
        again = kernel_for(None, SHAPE, 30, 8192, lambda k, t, f: files.kept("attention", k, t, f))
        assert not first.flash and first == again and passes == [SHAPE.key]
        path = tmp_path / "attention-k.json"
        kept = json.loads(path.read_text())
        kept[SHAPE.key]["at"] -= RETRY_SECONDS + 1
        path.write_text(json.dumps(kept))
        kernel_for(None, SHAPE, 30, 8192, lambda k, t, f: files.kept("attention", k, t, f))
        assert passes == [SHAPE.key] * 2
    finally:
        patch.undo()


def test_kept_costs_are_read_back_as_costs() -> None:
    kept = {"off": vars(OFF), "on": vars(ON)}
    assert kernel_for(None, SHAPE, 30, 32768, lambda k, t, f: kept) == choose(
        OFF, ON, Turn.of(32768), 30
    )


def test_the_report_lists_each_loaded_model_until_its_last_instance_goes() -> None:
    chosen = Attention()
    fixed = Choice(False, "a recurrent or hybrid model: not timed; off, the CPU's default")
    for _ in range(2):
        chosen.loaded("m", fixed)
    assert chosen.report() == {"models": {"m": {"on": False, "why": fixed.why}}}
    chosen.released("m")
    assert "m" in chosen.report()["models"]
    chosen.released("m")
    chosen.released("never loaded")
    assert chosen.report() == {"models": {}}


def test_the_machine_keeps_a_measure_once_taken(tmp_path: Path) -> None:
    files = MachineFiles(tmp_path, key="k")
    taken: list[str] = []

    def take() -> dict[str, Any]:
        taken.append("once")
        return {"off": vars(OFF), "on": vars(ON)}

    first = files.kept("attention", SHAPE.key, take)
    again = MachineFiles(tmp_path, key="k").kept("attention", SHAPE.key, take)
    assert first == again and taken == ["once"]
    other = Shape(14, 2, 64).key
    MachineFiles(tmp_path, key="k").kept("attention", other, take)
    assert set(json.loads((tmp_path / "attention-k.json").read_text())) == {SHAPE.key, other}
    files.kept("attention", other, take, fresh=lambda value: False)
    assert taken == ["once"] * 3  # what is not fresh is taken again


def test_a_measure_that_raises_is_not_kept_and_a_broken_file_is_measured_again(
    tmp_path: Path,
) -> None:
    files = MachineFiles(tmp_path, key="k")

    def fails() -> dict[str, Any]:
        raise RuntimeError("the timed pass failed (exit 1)")

    with pytest.raises(RuntimeError):
        files.kept("attention", SHAPE.key, fails)
    assert not (tmp_path / "attention-k.json").exists()
    (tmp_path / "attention-k.json").write_text("{not json")
    assert files.kept("attention", SHAPE.key, lambda: {"off": 1}) == {"off": 1}


def test_the_pass_times_both_kernels_on_a_model_of_the_shape() -> None:
    """The child process, for real: a shape whose head size is not its width over its
    heads (the timed model's width is its own). Each kernel's costs price a turn at some
    time (a busy machine may flatten a slope, never every cost)."""
    costs = measure(Shape(4, 2, 32))
    assert set(costs) == {"off", "on"}
    for kernel in costs.values():
        assert min(vars(kernel).values()) >= 0
        reading, writing = turn_seconds(kernel, Turn.of(8192), LAYERS)
        assert reading > 0 and writing > 0
