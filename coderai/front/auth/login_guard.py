"""Wrong console passwords are slowed, then locked out: per user *and* address, and per
address; a user attacked from many addresses is slowed, never locked.

Each failure within the window makes the next attempt for that user at that address (or
from that address) wait `delay` seconds more before it is checked; `max_failures` within
the window lock that pair, and an address that many for any users, for `lock` seconds
(the right password is refused there too, so guessing cannot go on at a slower pace).

A lock by user alone would let a stranger lock the admin out by guessing from anywhere;
instead a user's failures from all addresses slow each attempt for that user, up to
USER_DELAY_MOST (the wait comes before the check, so a client that gives up early learns
nothing). An IPv6 client counts by its /64.

Decisions over in-memory counters with the time passed in; a restart forgets them, which
costs an attacker a restart of our process — not something they can cause.
"""

from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass

#: tracked names and addresses beyond which stale ones are forgotten
_PRUNE_ABOVE = 10_000
#: the longest a wrong answer waits for the failures of its user from everywhere (s)
USER_DELAY_MOST = 30.0


@dataclass(frozen=True)
class LoginPolicy:
    delay: float
    max_failures: int
    window: float
    lock: float


def address_key(remote: str) -> str:
    """Who an address is, for counting: an IPv6 address by its /64 (one host's share of
    a network, which it may change at will), an IPv4 address as it is."""
    try:
        ip = ipaddress.ip_address(remote)
    except ValueError:
        return remote
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


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
        """Seconds until this user may try again from this address; 0 if they may now."""
        wait = 0.0
        for who in (f"pair:{user}\n{address}", f"addr:{address}"):
            failures = self._recent(who, now)
            if len(failures) >= self.policy.max_failures:
                wait = max(wait, failures[-1] + self.policy.lock - now)
        return wait

    def failed(self, user: str, address: str, now: float) -> float:
        """Record an attempt as a wrong password (before it is checked: guesses sent at
        once are counted as they arrive); how long to wait before checking it: by the
        failures before it, so a first attempt is not delayed."""
        if len(self._failures) > _PRUNE_ABOVE:
            self._prune(now)
        counts = []
        for who in (f"pair:{user}\n{address}", f"addr:{address}", f"user:{user}"):
            failures = self._recent(who, now)
            counts.append(len(failures))
            failures.append(now)
            self._failures[who] = failures
        here = self.policy.delay * max(counts[:2])
        return max(here, min(USER_DELAY_MOST, self.policy.delay * counts[2]))

    def succeeded(self, user: str, address: str) -> None:
        """The right password: this pair's and this address's failures are forgotten;
        the user's from elsewhere stay (they were not this client's)."""
        self._failures.pop(f"pair:{user}\n{address}", None)
        self._failures.pop(f"addr:{address}", None)

    def _prune(self, now: float) -> None:
        for who in list(self._failures):
            if not self._recent(who, now):
                del self._failures[who]
