"""How long a sequence's draft is (coderai/engine/backends/llamacpp/draft_policy.py)."""

from __future__ import annotations

import itertools
import random

import pytest

from coderai.engine.backends.llamacpp.draft_policy import (
    STALE,
    Shadow,
    StepCosts,
    best_lengths,
    expected_tokens,
    updated_acceptance,
)


def best_length(accepted: float, measured: StepCosts, decoding: int, most: int) -> int:
    """One sequence's length among `decoding`, the others drafting nothing."""
    others = decoding - 1
    return best_lengths([accepted, *[0.0] * others], [most, *[0] * others], measured)[0]


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


def test_the_acceptance_rate_counts_tokens_not_steps() -> None:
    """A sequence copying its prompt has whole drafts accepted: eight accepted tokens say
    more than one, so one such step brings the long drafts that pay on copied text."""
    assert updated_acceptance(0.5, 8, 8) > updated_acceptance(0.5, 1, 1)
    assert updated_acceptance(0.5, 8, 8) > 0.9
    assert updated_acceptance(0.5, 8, 7) < updated_acceptance(0.5, 7, 7)


def test_a_step_moves_the_other_sizes_by_the_machines_share_of_its_surprise() -> None:
    """Other models' steps, a shared CPU, a colder cache slow every size alike: a 1-token
    step twice as slow as measured raises the price of a 9-token one too, a little."""
    measured = StepCosts()
    measured.observe(1, 0.010)
    measured.observe(9, 0.050)
    measured.observe(1, 0.020)
    nine = measured.estimate(9)
    assert nine is not None and 0.050 < nine < 0.060


def test_after_a_slow_moment_the_choice_returns_to_what_the_quiet_machine_gives() -> None:
    """The decision can recover: 9-token steps measured while the machine was slow stop
    the long drafts; once it is quiet again the steps decoded (of whatever length is then
    chosen) bring the prices down, and within STALE steps a 9-token step is decoded again
    and the choice is the one the quiet machine gave before."""

    def quiet(tokens: int) -> float:
        return 0.014 + 0.002 * (tokens - 1)

    measured = StepCosts()
    for tokens in (1, 9, 5, 3, 2):
        measured.observe(tokens, quiet(tokens))
    before = best_length(0.9, measured, 1, 8)
    assert before > 0
    for _ in range(5):
        measured.observe(1 + before, 10 * quiet(1 + before))
    assert best_length(0.9, measured, 1, 8) < before
    chosen = []
    for _ in range(STALE + 1):
        length = best_length(0.9, measured, 1, 8)
        chosen.append(length)
        measured.observe(1 + length, quiet(1 + length))
    assert chosen[-1] == before


def test_one_stalled_step_moves_the_prices_as_a_step_twice_as_slow_does() -> None:
    stalled, slow = StepCosts(), StepCosts()
    for measured, seconds in ((stalled, 0.500), (slow, 0.040)):
        measured.observe(9, 0.020)
        measured.observe(9, seconds)
    assert stalled.estimate(9) == pytest.approx(slow.estimate(9))


def test_a_price_stale_steps_old_is_replaced_by_the_step_that_measures_it_again() -> None:
    """A price from a loaded moment (a shape the quiet machine does not have) is not worn
    down a fifth at a time by retries STALE steps apart: the retry's measure replaces it."""
    measured = StepCosts()
    measured.observe(9, 0.400)
    for _ in range(STALE):
        measured.observe(1, 0.015)
    measured.observe(9, 0.090)
    assert measured.estimate(9) == pytest.approx(0.090)


def test_a_length_not_measured_for_long_is_tried_again_where_guesses_come_true() -> None:
    measured = costs(0.001, 0.010, range(1, 10))  # no draft pays at 0.8
    assert best_length(0.8, measured, 1, 8) == 0
    for _ in range(STALE):
        measured.observe(1, 0.011)
    assert best_length(0.8, measured, 1, 8) == 8
    assert best_length(0.2, measured, 1, 8) == 0  # guesses that miss: not worth the check


def test_a_shadow_guess_is_scored_a_token_at_a_time_until_one_differs() -> None:
    shadow = Shadow()
    shadow.start([5, 6, 7])
    assert shadow.see(5) == (1, 1)
    assert shadow.see(6) == (1, 1)
    assert shadow.see(9) == (1, 0)
    assert shadow.see(7) is None  # dropped: nothing watched until the next guess


def test_a_shadow_guess_all_sampled_is_done() -> None:
    shadow = Shadow()
    shadow.start([5, 6])
    shadow.start([1, 2])  # one guess at a time: the first is still being checked
    assert shadow.see(5) == (1, 1)
    assert shadow.see(6) == (1, 1)
    assert not shadow.pending()
    assert shadow.see(1) is None


def test_shadow_guesses_that_come_true_bring_drafting_back() -> None:
    """A sequence whose early drafts missed stops drafting; once its own text repeats, the
    guesses it was not decoding come true and the policy drafts again, after a few of
    their tokens."""
    dear_then_cheap = costs(0.010, 0.002, range(1, 65))
    rate = 0.1
    assert best_length(rate, dear_then_cheap, 1, 8) == 0
    shadow = Shadow()
    shadow.start([1, 2, 3, 4, 5, 6, 7, 8])
    seen = 0
    while best_length(rate, dear_then_cheap, 1, 8) == 0:
        settled = shadow.see(seen + 1)
        assert settled == (1, 1)
        rate = updated_acceptance(rate, *settled)
        seen += 1
    assert seen <= 4


def test_a_guess_cut_off_by_a_real_draft_is_dropped() -> None:
    shadow = Shadow()
    shadow.start([5, 6, 7])
    shadow.see(5)
    assert shadow.pending()
    shadow.clear()
    assert not shadow.pending()
    assert shadow.see(6) is None


def rate(accepted: list[float], lengths: list[int], measured: StepCosts) -> float:
    """Tokens per second a step of these drafts is expected to yield."""
    tokens = sum(expected_tokens(a, n) for a, n in zip(accepted, lengths, strict=True))
    seconds = measured.estimate(len(lengths) + sum(lengths))
    assert seconds is not None
    return tokens / seconds


def test_drafts_of_sequences_in_one_step_are_priced_together() -> None:
    """A compute-bound CPU step (SmolLM2 on 2 cores: 12 ms, and 5 ms a token more): four
    sequences copying their prompts. Each choosing as if it drafted alone gave a step of
    4 + 32 tokens; chosen together, fewer, and more tokens per second than either that or
    plain decoding."""
    measured = costs(0.012, 0.005, range(1, 41))
    accepted = [0.9] * 4
    alone = [best_length(a, measured, 4, 8) for a in accepted]
    together = best_lengths(accepted, [8] * 4, measured)
    assert sum(together) < sum(alone)
    assert rate(accepted, together, measured) > rate(accepted, alone, measured)
    assert rate(accepted, together, measured) > rate(accepted, [0] * 4, measured)


def test_draft_tokens_go_first_where_they_are_likeliest_accepted() -> None:
    measured = costs(0.050, 0.004, range(1, 41))
    lengths = best_lengths([0.95, 0.3, 0.0], [8, 8, 8], measured)
    assert lengths[0] >= lengths[1] >= lengths[2] == 0
    assert lengths[0] > 0
    assert best_lengths([0.95, 0.9], [0, 8], measured)[0] == 0  # no room, no draft


def best_by_search(accepted: list[float], rooms: list[int], measured: StepCosts) -> float:
    """The highest tokens per second of any lengths within the rooms (every one tried)."""
    best = rate(accepted, [0] * len(rooms), measured)
    for lengths in itertools.product(*(range(room + 1) for room in rooms)):
        best = max(best, rate(accepted, list(lengths), measured))
    return best


def test_the_lengths_chosen_are_the_best_of_all_lengths() -> None:
    """Against every allocation, on step costs from nearly free to dearer than a token
    yields, for one to three sequences (a fixed seed: the same cases every run)."""
    rng = random.Random(46)
    for _ in range(150):
        decoding = rng.randint(1, 3)
        measured = costs(rng.uniform(0.005, 0.05), rng.uniform(0.0005, 0.02), range(1, 30))
        accepted = [rng.choice([0.0, rng.random(), 0.95]) for _ in range(decoding)]
        rooms = [rng.randint(0, 4) for _ in range(decoding)]
        chosen = best_lengths(accepted, rooms, measured)
        assert all(0 <= n <= room for n, room in zip(chosen, rooms, strict=True))
        assert rate(accepted, chosen, measured) == pytest.approx(
            best_by_search(accepted, rooms, measured)
        )


def test_tokens_no_draft_would_have_accepted_are_not_bought_where_steps_seem_cheaper() -> None:
    measured = StepCosts()
    for size, seconds in ((1, 0.02), (2, 0.03), (3, 0.05), (4, 0.04)):
        measured.observe(size, seconds)
    assert best_lengths([0.0, 0.0], [2, 2], measured) == [0, 0]
    assert measured.estimate(6) == pytest.approx(0.04)  # never less past the largest


def test_an_unmeasured_length_is_tried_by_the_likeliest_sequence_alone() -> None:
    measured = costs(0.012, 0.005, range(1, 5))
    assert best_lengths([0.2, 0.9, 0.5, 0.1], [8] * 4, measured) == [0, 8, 0, 0]
