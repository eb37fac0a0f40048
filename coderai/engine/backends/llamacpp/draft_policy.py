"""How many draft tokens a sequence should decode in a step: as many as pay for themselves.

A draft token costs the step's time whether it is accepted or not, and what a step costs per
token depends on the model and the machine: where decoding reads the weights once for a
whole batch (a large model, a GPU) a few more tokens are nearly free, and where it is
compute-bound (a 135M model on a 2-core AVX2 CPU: a 9-token step, sampling included,
measured 4.9 to 5.4 times a 1-token one) they are not. So the length is chosen from the
step times measured on this instance and the share of its draft tokens this sequence has
had accepted: the length whose tokens per second, counting the other sequences in the
step, are the highest; 0 (no draft) where none beats plain decoding.

A sequence whose drafts do not pay is not drafted for, so its decoded drafts can no
longer say when they would: its n-gram guesses (free to make) are then checked against the
tokens it goes on to sample instead (`Shadow`), and the accepted share follows its text either
way. Without that, a few early misses fixed the length at 0 for the rest of an answer that
went on to repeat itself (measured on Gemma 3: 2 draft tokens in 256).

What a step costs is measured as the runner spends it (decoding and sampling, decode steps
only: a step that reads a prompt samples once for many tokens, and at another depth), and
it changes as the engine runs: other models' steps leave the caches cold, the machine is
shared, the sequence grows. Each step moves its own size's estimate and, less, every other
size's by the same ratio (the machine's speed as a whole), so a size last measured in a
slow moment is not priced by that moment for ever; and a draft length not measured for
STALE steps is tried again where the sequence's guesses come true often enough to pay.
Before, a size measured once (a prompt's chunk, or a draft step in a slow moment) kept its
price until that size was chosen again, which a high price prevented.

Pure decisions; the backend feeds it its measurements.
"""

from __future__ import annotations

import bisect

#: before anything is measured, a sequence's draft tokens are taken to be accepted at this
#: rate
PRIOR_ACCEPTED = 0.5
#: weight of the newest observation in the running estimates
SMOOTHING = 0.2
#: how far (in ratio, as a power) a measured step moves every other size's estimate: the
#: part of its surprise taken to be the machine's, not its size's
DRIFT = 0.1
#: steps after which a draft length not measured since is tried again, and its price
#: replaced by what that step measures
STALE = 64
#: the most one step's time moves the prices, as a ratio to what was expected
SPIKE = 2.0


def expected_tokens(accepted: float, length: int) -> float:
    """Tokens a step yields for a sequence decoding `length` draft tokens when each is
    accepted with probability `accepted` (given those before it were): its own token, plus
    the drafts up to the first one not accepted."""
    return sum(accepted**i for i in range(length + 1))


class StepCosts:
    """Seconds a decode step takes by the tokens it decodes, from this instance's own
    steps; between measured sizes the cost is interpolated, past the largest extrapolated
    at the cost per token of the two largest. Each observation moves its size's estimate
    by SMOOTHING and every other size's by DRIFT, as ratios; a size last measured STALE
    steps before takes the new measure as it is."""

    def __init__(self) -> None:
        self._sizes: list[int] = []
        self._seconds: dict[int, float] = {}
        #: the observation count when each size was last measured
        self._seen: dict[int, int] = {}
        self._count = 0

    def observe(self, tokens: int, seconds: float) -> None:
        if tokens <= 0 or seconds <= 0:
            return
        age = self.age(tokens)
        self._count += 1
        self._seen[tokens] = self._count
        old = self._seconds.get(tokens)
        if old is None:
            bisect.insort(self._sizes, tokens)
        if old is None or (age is not None and age >= STALE):
            self._seconds[tokens] = seconds  # an old price says nothing of now
            return
        # one step stalled by another process moves the prices as one twice as slow does
        surprise = min(max(seconds / old, 1 / SPIKE), SPIKE)
        drift = surprise**DRIFT
        for size in self._sizes:
            self._seconds[size] *= drift
        self._seconds[tokens] = old * surprise**SMOOTHING

    def largest(self) -> int:
        """The most tokens a measured step decoded (0 before any)."""
        return self._sizes[-1] if self._sizes else 0

    def age(self, tokens: int) -> int | None:
        """Steps measured since a step of `tokens` was (None: never)."""
        seen = self._seen.get(tokens)
        return None if seen is None else self._count - seen

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
        # a larger step is never taken to cost less (two noisy sizes may say so)
        per_token = max(0.0, (seconds[hi] - seconds[lo]) / (hi - lo))
        return seconds[hi] + per_token * (tokens - hi)


def best_lengths(accepted: list[float], rooms: list[int], costs: StepCosts) -> list[int]:
    """Draft lengths for the sequences decoding in a step (each given the chance its draft
    tokens are accepted, and the most it may decode) that yield the most tokens per second
    for the step as a whole; none where no lengths beat plain decoding.

    Priced together, since every draft token makes the one step longer: where four
    sequences each chose the length that paid as if it drafted alone, a step of 4 + 32
    tokens was priced as one of 4 + 8. Each further draft token goes to the sequence whose
    next one is likeliest accepted (accepted ** its position: the gains only fall along a
    sequence), and the step's total is where tokens per second peak.

    A length never measured is tried (so the choice is not stuck at none for want of a
    measurement), and again where its measure is STALE steps old and the drafts would yield
    at least two tokens a step (so a cost measured in a slow moment is not kept for ever,
    and a sequence whose guesses miss is not made to pay for the check); by one sequence,
    the likeliest, so that trying costs one sequence's draft."""
    decoding = len(accepted)
    lengths = [0] * decoding
    plain = costs.estimate(decoding)
    if plain is None or not any(room > 0 for room in rooms):
        return lengths
    lead = max(range(decoding), key=lambda i: (rooms[i] > 0, accepted[i]))
    most = rooms[lead]
    age = costs.age(decoding + most)
    if (costs.largest() < decoding + most and age is None) or (
        age is not None and age >= STALE and expected_tokens(accepted[lead], most) >= 2
    ):
        lengths[lead] = most
        return lengths
    best, rate = list(lengths), decoding / plain
    tokens = float(decoding)
    for added in range(1, sum(rooms) + 1):
        i = max(
            (i for i in range(decoding) if lengths[i] < rooms[i]),
            key=lambda i: accepted[i] ** (lengths[i] + 1),
        )
        gain = accepted[i] ** (lengths[i] + 1)
        if gain <= 0:  # no further token would be accepted: it could only cost
            break
        lengths[i] += 1
        tokens += gain
        seconds = costs.estimate(decoding + added)
        assert seconds is not None
        if tokens / seconds > rate:
            best, rate = list(lengths), tokens / seconds
    return best


def updated_acceptance(rate: float, drafted: int, taken: int) -> float:
    """A sequence's estimate of the chance a draft token is accepted, after a step that
    accepted `taken` of `drafted`: each accepted token a success and the first one not
    accepted a failure, each moving the estimate by SMOOTHING in turn. (Counted by token,
    not by step: a sequence copying its prompt has whole drafts accepted for a stretch,
    then one missed at a change, and a step of eight accepted says more than one of one.)"""
    for _ in range(taken):
        rate += SMOOTHING * (1.0 - rate)
    if taken < drafted:
        rate -= SMOOTHING * rate
    return rate


class Shadow:
    """A draft that was not decoded, checked against the tokens sampled after it, a token
    at a time: each guessed token sampled counts as accepted as it comes, so a sequence
    back on copied text drafts again after a token or two instead of after a whole guess
    (which kept it on one-token steps for eight of them)."""

    def __init__(self) -> None:
        self.guess: list[int] = []
        self._matched = 0

    def start(self, guess: list[int]) -> None:
        """Watch a new guess, unless one is still being checked."""
        if not self.guess:
            self.guess, self._matched = guess, 0

    def see(self, token: int) -> tuple[int, int] | None:
        """The next sampled token, as a draft of one: (1, 1) where it is the guess's next
        token, (1, 0) where it is not (the guess is dropped), None without a guess."""
        if not self.guess:
            return None
        if token == self.guess[self._matched]:
            self._matched += 1
            if self._matched == len(self.guess):
                self.clear()
            return (1, 1)
        self.clear()
        return (1, 0)

    def pending(self) -> bool:
        return bool(self.guess)

    def clear(self) -> None:
        """The sequence decodes a real draft now, which is measured instead (what this guess
        showed so far is counted already)."""
        self.guess, self._matched = [], 0
