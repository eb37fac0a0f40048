from __future__ import annotations

import pytest

from coderai.engine.backends.transformers.gpu_memory import GIB, max_memory_plan

CPU = 64 * GIB


def test_cpu_only_engine_has_no_plan() -> None:
    assert max_memory_plan([], {}, CPU) is None


def test_default_leaves_headroom_on_each_card() -> None:
    device_map, plan = max_memory_plan([24 * GIB, 12 * GIB], {}, CPU)  # type: ignore[misc]
    assert device_map == "auto"
    assert plan == {0: int(24 * GIB * 0.9), 1: int(12 * GIB * 0.9), "cpu": CPU}


def test_max_gpu_percent_caps_each_card() -> None:
    _, plan = max_memory_plan([10 * GIB], {"max_gpu_percent": 50}, CPU)  # type: ignore[misc]
    assert plan[0] == 5 * GIB


def test_balanced_percent_spreads_layers() -> None:
    plan = max_memory_plan([8 * GIB, 8 * GIB], {"balanced_gpu_percent": 75}, CPU)
    assert plan is not None
    assert plan[0] == "balanced"
    assert plan[1][0] == plan[1][1] == 6 * GIB


def test_max_vram_splits_in_proportion_to_card_size() -> None:
    _, plan = max_memory_plan([24 * GIB, 8 * GIB], {"max_vram": 8}, CPU)  # type: ignore[misc]
    assert plan[0] == 6 * GIB
    assert plan[1] == 2 * GIB


def test_a_percent_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="percent"):
        max_memory_plan([GIB], {"max_gpu_percent": 150}, CPU)
