"""When idle prefix entries are parked (coderai/engine/backends/llamacpp/parking.py):
pure decisions from the costs measured as the engine runs."""

from __future__ import annotations

import pytest

from coderai.engine.backends.llamacpp.parking import Parking, attend_share


def test_a_cells_share_of_a_token_is_its_attention_over_the_weights_arithmetic() -> None:
    # SmolLM2-135M: 30 layers 576 wide; one cell adds about 1/4000 of a token's cost
    assert attend_share(30, 576, 134_515_008) == pytest.approx(2.57e-4, rel=0.01)
    assert attend_share(30, 576, 0) == 0.0


def test_parks_wait_for_the_first_token_until_a_park_and_a_prompt_token_are_timed() -> None:
    per_token: list[float | None] = [None]
    parking = Parking(0.001, lambda: per_token[0])
    assert not parking.ahead(10_000)  # nothing timed
    parking.parked_now(100, 0.002, False)  # 20 µs a cell
    assert not parking.ahead(10_000)  # no prompt token timed yet
    per_token[0] = 0.001  # a cell costs each token read beside it 1 µs
    assert not parking.ahead(19) and parking.ahead(21)  # reading 20 costs what saving does


def test_the_save_cost_is_smoothed_and_ignores_empty_parks() -> None:
    parking = Parking(0.001, lambda: 0.001)
    parking.parked_now(100, 0.002, False)
    parking.parked_now(0, 1.0, False)  # nothing parked: says nothing
    assert parking.save == pytest.approx(2e-5)
    parking.parked_now(100, 0.012, False)  # a slow one moves the estimate, not all the way
    assert parking.save is not None and 2e-5 < parking.save < 1.2e-4


def test_a_step_parks_about_its_seconds_worth_and_one_entry_before_any_is_timed() -> None:
    parking = Parking(0.001, lambda: 0.001)
    assert parking.step_bound(0.5) == 1
    parking.parked_now(1000, 0.02, False)  # 20 µs a cell
    assert parking.step_bound(0.5) == pytest.approx(25_000, abs=1)
    assert parking.step_bound(0.0) == 1


def test_without_the_models_shape_parks_always_wait() -> None:
    parking = Parking(0.0, lambda: 0.001)
    parking.parked_now(100, 0.002, False)
    assert not parking.ahead(1_000_000)


def test_a_step_that_parks_says_whether_more_are_left_and_counts_what_it_saved() -> None:
    parking = Parking(0.001, lambda: 0.001)
    parking.start()
    parking.parked_now(100, 0.002, True)
    assert parking.due and parking.parked == 100
    parking.parked_now(50, 0.001, False)
    assert not parking.due and parking.parked == 150
    parking.wait()
    assert parking.deferred == 1
