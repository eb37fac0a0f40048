"""Token budgets per key: when a day and a month reset, what is refused, and the spending
they are checked against. Decisions over plain data, the time passed in."""

from __future__ import annotations

import datetime
import sqlite3
from pathlib import Path

from coderai.errors import BudgetExhausted
from coderai.front.auth.budgets import Spending, day_reset, month_reset, month_start, refusal
from coderai.state import api_keys
from coderai.state.database import Database, UsageRow


def at(text: str) -> float:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC).timestamp()


def test_a_day_resets_at_the_next_utc_midnight_and_a_month_on_its_first() -> None:
    assert day_reset(at("2026-12-06 18:30:00")) == at("2026-12-07 00:00:00")
    assert day_reset(at("2026-12-31 23:59:59")) == at("2027-01-01 00:00:00")
    assert day_reset(at("2026-12-07 00:00:00")) == at("2026-12-08 00:00:00")
    assert month_reset(at("2026-12-06 18:30:00")) == at("2027-01-01 00:00:00")
    assert month_reset(at("2026-02-28 12:00:00")) == at("2026-03-01 00:00:00")
    assert month_start(at("2026-12-06 18:30:00")) == "2026-12-01"


def test_a_key_under_its_budgets_may_start_and_one_at_a_budget_is_refused_until_reset() -> None:
    key, _ = api_keys.create("team", tokens_per_day=100, tokens_per_month=1_000)
    now = at("2026-12-06 18:30:00")
    assert refusal(key, 99, 999, now) is None
    daily = refusal(key, 100, 500, now)
    assert isinstance(daily, BudgetExhausted)
    assert daily.status == 429
    assert (daily.error_type, daily.code) == ("insufficient_quota", "insufficient_quota")
    assert daily.retry_after == 5 * 3600 + 30 * 60  # to midnight, UTC
    assert daily.headers() == {"Retry-After": str(daily.retry_after), "x-should-retry": "false"}
    assert "100 of its 100 tokens today (UTC)" in daily.message
    assert "resets at 2026-12-07T00:00:00Z" in daily.message
    # the month's, which lasts longer, is named when both are spent
    monthly = refusal(key, 150, 1_200, now)
    assert monthly is not None and "this month (UTC)" in monthly.message
    assert monthly.retry_after == int(at("2027-01-01 00:00:00") - now)
    unlimited, _ = api_keys.create("free")
    assert refusal(unlimited, 10**9, 10**12, now) is None


def test_spending_counts_each_day_and_the_month_and_forgets_last_months() -> None:
    spending = Spending()
    spending.load([("k", "2026-11-30", 500), ("k", "2026-12-01", 40), ("j", "2026-12-06", 7)])
    spending.add("k", "2026-12-06", 10)
    spending.add("k", "2026-12-06", 5)
    spending.add("", "2026-12-06", 99)  # requests without a key have no budget
    now = at("2026-12-06 12:00:00")
    assert spending.spent("k", now) == (15, 55)
    assert spending.spent("j", now) == (7, 7)
    assert spending.spent("none", now) == (0, 0)
    # the next day starts at nothing; the month goes on
    assert spending.spent("k", at("2026-12-07 00:00:01")) == (0, 55)
    # a new month's first count drops the old months' days
    spending.add("k", "2027-01-01", 3)
    assert spending.spent("k", at("2027-01-01 08:00:00")) == (3, 3)


def test_the_database_keeps_a_keys_budgets_and_weight_and_changes_them(tmp_path: Path) -> None:
    db = Database(tmp_path)
    record, _ = api_keys.create("team", tokens_per_day=1_000, weight=2.5, rpm=3)
    db.add_key(record)
    assert db.key(record.id) == record
    changed = db.update_key(
        record.id, {"tokens_per_day": None, "tokens_per_month": 9, "weight": 1.0}
    )
    assert changed is not None
    assert (changed.tokens_per_day, changed.tokens_per_month, changed.weight) == (None, 9, 1.0)
    assert changed.rpm == 3  # what was not named stays
    assert db.update_key("nosuchkey", {"rpm": 1}) is None
    db.add_usage(
        [UsageRow("2026-11-30", record.id, "m", 1, 5, 5),
         UsageRow("2026-12-02", record.id, "m", 1, 3, 4),
         UsageRow("2026-12-02", record.id, "n", 1, 1, 1),
         UsageRow("2026-12-02", "", "m", 1, 9, 9)],
        {},
    )  # fmt: skip
    assert db.tokens_by_day("2026-12-01") == [(record.id, "2026-12-02", 9)]
    db.close()


def test_keys_made_before_budgets_existed_are_read_with_none_and_weight_one(
    tmp_path: Path,
) -> None:
    # the schema as it was (version 1), with a key in it
    raw = sqlite3.connect(tmp_path / "coderai.db")
    raw.executescript(
        """CREATE TABLE api_keys (id TEXT PRIMARY KEY, name TEXT NOT NULL,
             secret_hash BLOB NOT NULL, models TEXT, expires_at REAL, rpm INTEGER,
             tpm INTEGER, max_concurrent INTEGER, created_at REAL NOT NULL,
             last_used_at REAL, revoked_at REAL);
           INSERT INTO api_keys VALUES ('0123456789ab', 'old', x'00', NULL, NULL, 5, NULL,
             NULL, 1.0, NULL, NULL);
           PRAGMA user_version=1;"""
    )
    raw.close()
    db = Database(tmp_path)
    old = db.key("0123456789ab")
    assert old is not None and old.rpm == 5
    assert (old.tokens_per_day, old.tokens_per_month, old.weight) == (None, None, 1.0)
    db.close()
