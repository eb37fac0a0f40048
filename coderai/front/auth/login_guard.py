"""Wrong console passwords are slowed, then locked out, per user and per address.

Each failure within the window makes the next answer for that user or address later by
`delay` seconds more; `max_failures` within the window lock both for `lock` seconds (the
right password is refused too, so guessing cannot continue at a slower pace). Decisions
over in-memory counters with the time passed in; a restart forgets them, which costs an
attacker a restart of our process — not something they can cause.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: tracked names and addresses beyond which stale ones are forgotten
_PRUNE_ABOVE = 10_000


@dataclass(frozen=True)
class LoginPolicy:
    delay: float
    max_failures: int
    window: float
    lock: float


class LoginGuard:
    def __init__(self, policy: LoginPolicy) -> None:
        self.policy = policy
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, who: str, now: float) -> deque[float]:
        failures = self._failures.get(who)
        if failures is None:
            return deque()
        while failures and failures[0] <= now - self.policy.window:
            failures.popleft()
        return failures

    def locked_for(self, user: str, address: str, now: float) -> float:
        """Seconds until this user and address may try again; 0 if they may now."""
        wait = 0.0
        for who in (f"user:{user}", f"addr:{address}"):
            failures = self._recent(who, now)
            if len(failures) >= self.policy.max_failures:
                wait = max(wait, failures[-1] + self.policy.lock - now)
        return wait

    def failed(self, user: str, address: str, now: float) -> float:
        """Record a wrong password; how long to wait before answering it."""
        if len(self._failures) > _PRUNE_ABOVE:
            self._prune(now)
        count = 0
        for who in (f"user:{user}", f"addr:{address}"):
            failures = self._recent(who, now)
            failures.append(now)
            self._failures[who] = failures
            count = max(count, len(failures))
        return self.policy.delay * count

    def succeeded(self, user: str, address: str) -> None:
        self._failures.pop(f"user:{user}", None)
        self._failures.pop(f"addr:{address}", None)

    def _prune(self, now: float) -> None:
        for who in list(self._failures):
            if not self._recent(who, now):
                del self._failures[who]
