"""Token budgets per API key: prompt and completion tokens per UTC day and per UTC month.

Tokens are counted as usage is (usage.py), when a request ends, so a request admitted
under its budget may end past it (one overshoot, as with tokens per minute); the key's
next request is refused with 429 until the period resets, its Retry-After the seconds
until then and its message the time. The spending is kept in memory by the usage ledger
(its one writer, loaded from the database at start), so admission never waits for a read.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable

from coderai.errors import BudgetExhausted
from coderai.state.api_keys import ApiKey

UTC = datetime.UTC


def _utc(unix: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(unix, UTC)


def day_of(unix: float) -> str:
    """The UTC day, as usage rows name it."""
    return _utc(unix).date().isoformat()


def day_reset(now: float) -> float:
    """The next UTC midnight."""
    tomorrow = _utc(now).date() + datetime.timedelta(days=1)
    return datetime.datetime.combine(tomorrow, datetime.time(), UTC).timestamp()


def month_reset(now: float) -> float:
    """The first moment of the next UTC month."""
    today = _utc(now).date()
    year, month = (today.year + 1, 1) if today.month == 12 else (today.year, today.month + 1)
    return datetime.datetime(year, month, 1, tzinfo=UTC).timestamp()


def refusal(key: ApiKey, today: int, this_month: int, now: float) -> BudgetExhausted | None:
    """Why this key may not start a request now, having spent these tokens today and
    this month (pure); None if it may. The month's budget is named first: it lasts longer."""
    spent = [
        (key.tokens_per_month, this_month, "this month (UTC)", month_reset(now)),
        (key.tokens_per_day, today, "today (UTC)", day_reset(now)),
    ]
    for budget, used, period, reset in spent:
        if budget is not None and used >= budget:
            at = _utc(reset).isoformat().replace("+00:00", "Z")
            return BudgetExhausted(
                f"API key {key.name!r} has used {used:,} of its {budget:,} tokens {period};"
                f" its budget resets at {at}",
                retry_after=math.ceil(reset - now),
            )
    return None


class Spending:
    """Tokens each key spent per UTC day, this month's days only (what budgets read)."""

    def __init__(self) -> None:
        self._days: dict[str, dict[str, int]] = {}

    def load(self, rows: Iterable[tuple[str, str, int]]) -> None:
        """(key id, day, tokens) as the database holds them, before any request counts."""
        for key_id, day, tokens in rows:
            self.add(key_id, day, tokens)

    def add(self, key_id: str, day: str, tokens: int) -> None:
        if not key_id or not tokens:
            return
        days = self._days.setdefault(key_id, {})
        days[day] = days.get(day, 0) + tokens
        month = day[:7]
        for old in [d for d in days if d[:7] < month]:  # last months' days are not read
            del days[old]

    def spent(self, key_id: str, now: float) -> tuple[int, int]:
        """(tokens today, tokens this month) of a key."""
        days = self._days.get(key_id, {})
        today = day_of(now)
        month = today[:7]
        return days.get(today, 0), sum(t for d, t in days.items() if d[:7] == month)


def month_start(now: float) -> str:
    """The first day of this UTC month, as usage rows name days."""
    return day_of(now)[:7] + "-01"
