"""How many draft tokens a sequence should decode in a step: as many as pay for themselves.

A draft token costs the step's time whether it is accepted or not, and what a step costs per
token depends on the model and the machine: where decoding reads the weights once for a
whole batch (a large model, a GPU) a few more tokens are nearly free, and where it is
compute-bound (a 135M model on a CPU core: a 9-token step measured 4.7 times a 1-token
one) they are not. So the length is chosen from the step times measured on this instance
and the share of its draft tokens this sequence has had accepted: the length whose tokens
per second, counting the other sequences in the step, are the highest; 0 (no draft) where
none beats plain decoding.

A sequence whose drafts do not pay is not drafted for, so its decoded drafts can no
longer say when they would: its n-gram guesses (free to make) are then checked against the
tokens it goes on to sample instead (`Shadow`), and the accepted share follows its text either
way. Without that, a few early misses fixed the length at 0 for the rest of an answer that
went on to repeat itself (measured on Gemma 3: 2 draft tokens in 256).

Pure decisions; the backend feeds it its measurements.
"""

from __future__ import annotations

import bisect

#: before anything is measured, a sequence's draft tokens are taken to be accepted at this
#: rate
PRIOR_ACCEPTED = 0.5
#: weight of the newest observation in the running estimates
SMOOTHING = 0.2


def expected_tokens(accepted: float, length: int) -> float:
    """Tokens a step yields for a sequence decoding `length` draft tokens when each is
    accepted with probability `accepted` (given those before it were): its own token, plus
    the drafts up to the first one not accepted."""
    return sum(accepted**i for i in range(length + 1))


class StepCosts:
    """Seconds a step takes by the tokens it decodes, smoothed, from this instance's own
    steps; between measured sizes the cost is interpolated, past the largest extrapolated
    at the cost per token of the two largest."""

    def __init__(self) -> None:
        self._sizes: list[int] = []
        self._seconds: dict[int, float] = {}

    def observe(self, tokens: int, seconds: float) -> None:
        if tokens <= 0 or seconds <= 0:
            return
        old = self._seconds.get(tokens)
        if old is None:
            bisect.insort(self._sizes, tokens)
            self._seconds[tokens] = seconds
        else:
            self._seconds[tokens] = old + SMOOTHING * (seconds - old)

    def largest(self) -> int:
        """The most tokens a measured step decoded (0 before any)."""
        return self._sizes[-1] if self._sizes else 0

    def estimate(self, tokens: int) -> float | None:
        sizes, seconds = self._sizes, self._seconds
        if not sizes:
            return None
        if tokens in seconds:
            return seconds[tokens]
        i = bisect.bisect_left(sizes, tokens)
        if 0 < i < len(sizes):
            lo, hi = sizes[i - 1], sizes[i]
            share = (tokens - lo) / (hi - lo)
            return seconds[lo] + share * (seconds[hi] - seconds[lo])
        if i == 0:  # below the smallest measured: no cheaper than it
            return seconds[sizes[0]]
        if len(sizes) == 1:
            return seconds[sizes[0]] * tokens / sizes[0]
        lo, hi = sizes[-2], sizes[-1]
        per_token = (seconds[hi] - seconds[lo]) / (hi - lo)
        return seconds[hi] + per_token * (tokens - hi)


def best_length(accepted: float, costs: StepCosts, decoding: int, most: int) -> int:
    """The draft length for one sequence of the `decoding` in a step that yields the most
    tokens per second, the others decoding one token each; 0 where no length beats none.
    Until a step as long as the longest draft has been measured (a prompt's chunk usually
    is), the longest is tried, so the choice is not stuck at 0 for want of a measurement."""
    plain = costs.estimate(decoding)
    if plain is None or most <= 0:
        return 0
    if costs.largest() < decoding + most:
        return most
    best, rate = 0, decoding / plain
    for length in range(1, most + 1):
        seconds = costs.estimate(decoding + length)
        assert seconds is not None
        tokens = decoding - 1 + expected_tokens(accepted, length)
        if tokens / seconds > rate:
            best, rate = length, tokens / seconds
    return best


def updated_acceptance(rate: float, drafted: int, taken: int) -> float:
    """A sequence's estimate of the chance a draft token is accepted, after a step that
    accepted `taken` of `drafted`: each accepted token a success, the first one not
    accepted a failure."""
    failures = 1 if taken < drafted else 0
    trials = taken + failures
    if trials == 0:
        return rate
    return rate + SMOOTHING * (taken / trials - rate)


class Shadow:
    """A draft that was not decoded, checked against the tokens sampled after it."""

    def __init__(self) -> None:
        self.guess: list[int] = []
        self._matched = 0

    def start(self, guess: list[int]) -> None:
        """Watch a new guess, unless one is still being checked."""
        if not self.guess:
            self.guess, self._matched = guess, 0

    def see(self, token: int) -> tuple[int, int] | None:
        """The next sampled token: (guessed, accepted) once the guess is settled (a token
        differed, or all matched), else None."""
        if not self.guess:
            return None
        if token == self.guess[self._matched]:
            self._matched += 1
            if self._matched < len(self.guess):
                return None
        settled = (len(self.guess), self._matched)
        self.guess, self._matched = [], 0
        return settled

    def pending(self) -> bool:
        return bool(self.guess)

    def clear(self) -> tuple[int, int] | None:
        """The sequence decodes a real draft now, which is measured instead: the tokens
        of this guess that came true so far, as accepted ((matched, matched)), or None. (Long
        guesses that keep coming true are the likeliest to be cut off here: dropping what
        they showed would bias the estimate low.)"""
        matched, self.guess, self._matched = self._matched, [], 0
        return (matched, matched) if matched else None
