"""Per-key limits on /v1: requests per minute, tokens per minute, requests at once.

Decisions over in-memory counters, with the time passed in, so they are tested without a
clock. Tokens are counted when a request ends (prompt and completion), so a burst of
long answers can overshoot a token limit once; the next request then waits until the
minute's total is below it again — the same rule OpenAI's own limits follow.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from coderai.errors import TooManyRequests
from coderai.state.api_keys import ApiKey

WINDOW = 60.0


@dataclass
class _Use:
    #: admission times within the window
    requests: deque[float] = field(default_factory=deque)
    #: (end time, tokens) within the window, and their sum
    tokens: deque[tuple[float, int]] = field(default_factory=deque)
    token_sum: int = 0
    running: int = 0

    def forget_before(self, cutoff: float) -> None:
        while self.requests and self.requests[0] <= cutoff:
            self.requests.popleft()
        while self.tokens and self.tokens[0][0] <= cutoff:
            self.token_sum -= self.tokens.popleft()[1]


class KeyLimits:
    def __init__(self) -> None:
        self._use: dict[str, _Use] = {}

    def admit(self, key: ApiKey, now: float) -> None:
        """Count a request in, or raise TooManyRequests with how long to wait."""
        use = self._use.setdefault(key.id, _Use())
        use.forget_before(now - WINDOW)
        if key.max_concurrent is not None and use.running >= key.max_concurrent:
            raise TooManyRequests(
                f"API key {key.name!r} has {use.running} requests running, its limit",
                retry_after=1,
            )
        if key.rpm is not None and len(use.requests) >= key.rpm:
            wait = use.requests[len(use.requests) - key.rpm] + WINDOW - now
            raise TooManyRequests(
                f"API key {key.name!r} is limited to {key.rpm} requests per minute",
                retry_after=math.ceil(wait),
            )
        if key.tpm is not None and use.token_sum >= key.tpm:
            raise TooManyRequests(
                f"API key {key.name!r} is limited to {key.tpm} tokens per minute",
                retry_after=math.ceil(self._tokens_free_at(use, key.tpm) - now),
            )
        use.requests.append(now)
        use.running += 1

    @staticmethod
    def _tokens_free_at(use: _Use, limit: int) -> float:
        """When enough counted tokens leave the window to bring the sum under the limit."""
        total = use.token_sum
        for at, tokens in use.tokens:
            total -= tokens
            if total < limit:
                return at + WINDOW
        return use.tokens[-1][0] + WINDOW

    def release(self, key_id: str, now: float) -> None:
        """A request of this key ended."""
        use = self._use[key_id]
        use.running -= 1
        self._tidy(key_id, use, now)

    def spend(self, key_id: str, tokens: int, now: float) -> None:
        """Count the tokens a request of this key used (known when its jobs end, which
        for a request whose client left is a step after the request)."""
        use = self._use.setdefault(key_id, _Use())
        if tokens:
            use.tokens.append((now, tokens))
            use.token_sum += tokens
        self._tidy(key_id, use, now)

    def _tidy(self, key_id: str, use: _Use, now: float) -> None:
        use.forget_before(now - WINDOW)
        if not use.running and not use.requests and not use.tokens:
            del self._use[key_id]  # idle keys hold no memory

    def running(self, key_id: str) -> int:
        use = self._use.get(key_id)
        return use.running if use else 0
