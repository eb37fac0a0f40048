"""How long a sequence's draft is (coderai/engine/backends/llamacpp/draft_policy.py)."""

from __future__ import annotations

import pytest

from coderai.engine.backends.llamacpp.draft_policy import (
    Shadow,
    StepCosts,
    best_length,
    expected_tokens,
    updated_acceptance,
)


def costs(per_step: float, per_token: float, sizes: range) -> StepCosts:
    measured = StepCosts()
    for n in sizes:
        measured.observe(n, per_step + per_token * n)
    return measured


def test_a_step_yields_its_own_token_and_the_drafts_up_to_the_first_not_accepted() -> None:
    assert expected_tokens(0.0, 8) == 1
    assert expected_tokens(1.0, 8) == 9
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_where_more_tokens_cost_little_the_whole_draft_pays() -> None:
    """A memory-bound step (a large model, a GPU): 9 tokens cost about what 1 does."""
    cheap = costs(0.050, 0.001, range(1, 65))
    assert best_length(0.9, cheap, 1, 8) == 8
    assert best_length(0.6, cheap, 1, 8) >= 5  # past that, the rare 7th accepted costs more


def test_where_each_token_costs_as_much_as_a_step_no_draft_pays() -> None:
    """A compute-bound step (a 135M model on a CPU core): a draft costs what it yields."""
    dear = costs(0.001, 0.010, range(1, 65))
    assert best_length(0.5, dear, 1, 8) == 0
    assert best_length(0.95, dear, 1, 8) > 0  # unless nearly every guess is right


def test_the_longest_draft_is_tried_until_a_step_that_long_was_measured() -> None:
    assert best_length(0.1, costs(0.001, 0.010, range(1, 3)), 1, 8) == 8
    assert best_length(0.1, StepCosts(), 1, 8) == 0  # nothing measured at all: no draft


def test_costs_between_and_past_measured_sizes_are_interpolated_and_extrapolated() -> None:
    measured = StepCosts()
    measured.observe(1, 0.010)
    measured.observe(9, 0.050)
    assert measured.estimate(5) == pytest.approx(0.030)
    assert measured.estimate(17) == pytest.approx(0.090)
    assert measured.estimate(0) == pytest.approx(0.010)


def test_the_acceptance_rate_moves_toward_what_a_step_showed() -> None:
    assert updated_acceptance(0.5, 8, 8) > 0.5
    assert updated_acceptance(0.5, 8, 0) < 0.5
    assert updated_acceptance(0.5, 0, 0) == 0.5


def test_a_shadow_guess_settles_at_the_first_token_it_did_not_guess() -> None:
    shadow = Shadow()
    shadow.start([5, 6, 7])
    assert shadow.see(5) is None
    assert shadow.see(6) is None
    assert shadow.see(9) == (3, 2)
    assert shadow.see(7) is None  # settled: nothing watched until the next guess


def test_a_shadow_guess_all_sampled_settles_as_all_accepted() -> None:
    shadow = Shadow()
    shadow.start([5, 6])
    shadow.start([1, 2])  # one guess at a time: the first is still being checked
    assert shadow.see(5) is None
    assert shadow.see(6) == (2, 2)


def test_shadow_guesses_that_come_true_bring_drafting_back() -> None:
    """A sequence whose early drafts missed stops drafting; once its own text repeats, the
    guesses it was not decoding come true and the policy drafts again."""
    dear_then_cheap = costs(0.010, 0.002, range(1, 65))
    rate = 0.1
    assert best_length(rate, dear_then_cheap, 1, 8) == 0
    shadow = Shadow()
    for _ in range(10):
        shadow.start([1, 2, 3, 4, 5, 6, 7, 8])
        settled = None
        for token in range(1, 9):
            settled = shadow.see(token)
        assert settled == (8, 8)
        rate = updated_acceptance(rate, *settled)
    assert best_length(rate, dear_then_cheap, 1, 8) > 0


def test_a_guess_cut_off_by_a_real_draft_counts_what_came_true() -> None:
    shadow = Shadow()
    shadow.start([5, 6, 7])
    shadow.see(5)
    shadow.see(6)
    assert shadow.pending()
    assert shadow.clear() == (2, 2)
    assert not shadow.pending()
    assert shadow.clear() is None
