"""Model-free drafts for speculative decoding: prompt lookup by n-grams.

A coding agent's answer repeats much of what it was given (a file it rewrites with one
change, a name it calls again). When the last few tokens of a sequence appeared earlier in
it, the tokens that followed them then are a good guess for what follows now: the backend
decodes them together with the sequence's next token in one step and keeps those the
model itself would have chosen (see batch.py), so a step can yield several tokens
for the cost of about one.

The index is built as the sequence grows: each n-gram (of SHORTEST to LONGEST tokens) maps
to where the token after its latest occurrence is, so a lookup costs a few dict reads
however long the sequence is.
"""

from __future__ import annotations

#: the n-gram sizes looked up, the longest (the most specific) first
LONGEST, SHORTEST = 4, 2


class NgramIndex:
    def __init__(self, longest: int = LONGEST, shortest: int = SHORTEST) -> None:
        self.sizes = range(longest, shortest - 1, -1)
        #: n-gram -> index of the token that followed its latest occurrence
        self._follower: dict[tuple[int, ...], int] = {}
        #: tokens[:_indexed] have been indexed as followers
        self._indexed = 0

    def draft(self, tokens: list[int], most: int) -> list[int]:
        """Up to `most` tokens that followed the latest earlier occurrence of the longest
        n-gram `tokens` ends with; none if no such n-gram occurred before."""
        if most <= 0:
            return []
        self._index(tokens)
        end = len(tokens)
        for size in self.sizes:
            if end <= size:
                continue
            follower = self._follower.get(tuple(tokens[end - size :]))
            if follower is not None:
                return tokens[follower : follower + most]
        return []

    def _index(self, tokens: list[int]) -> None:
        # an n-gram ending just before index e is followed by tokens[e]; the one the
        # sequence ends with has no follower yet and is not indexed
        for e in range(max(self._indexed, 1), len(tokens)):
            for size in self.sizes:
                if e >= size:
                    self._follower[tuple(tokens[e - size : e])] = e
        self._indexed = max(self._indexed, len(tokens))
