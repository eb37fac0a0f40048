"""Passwords, API keys, per-key limits and the login guard: decisions over plain data."""

from __future__ import annotations

from pathlib import Path

import pytest

from coderai.errors import TooManyRequests
from coderai.front.auth.limits import WINDOW, KeyLimits
from coderai.front.auth.login_guard import (
    USER_DELAY_MOST,
    LoginGuard,
    LoginPolicy,
    address_key,
)
from coderai.state import api_keys
from coderai.state.database import Database, LastUser, UsageRow
from coderai.state.passwords import hash_password, verify_password


def test_a_password_hash_is_salted_and_verifies_only_its_password() -> None:
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first != second  # salted
    assert first.startswith("scrypt$")
    assert verify_password("correct horse", first)
    assert not verify_password("correct hors", first)


def test_a_malformed_hash_matches_nothing() -> None:
    assert not verify_password("x", "not-a-hash")
    assert not verify_password("x", "bcrypt$1$2$3$AAAA$BBBB")


def test_an_api_key_is_found_by_its_id_and_checked_by_its_secret() -> None:
    record, token = api_keys.create("ci")
    parts = api_keys.split(token)
    assert parts is not None and parts[0] == record.id
    assert record.matches(parts[1])
    assert not record.matches(parts[1][:-1] + ("A" if parts[1][-1] != "A" else "B"))
    assert token not in repr(record) and parts[1] not in str(record.public())


def test_tokens_not_shaped_like_keys_are_not_split() -> None:
    for token in ("sk-123", "cai-", "cai-zzzzzzzzzzzz-" + "a" * 43, "", "cai-" + "a" * 80):
        assert api_keys.split(token) is None


def test_a_key_limited_to_models_allows_them_by_id_or_alias() -> None:
    record, _ = api_keys.create("ci", models=("small",))
    assert record.allows(("small",)) and record.allows(("big", "small"))
    assert not record.allows(("big",))
    assert api_keys.create("all")[0].allows(("anything",))


def test_expired_and_revoked_keys_are_not_usable() -> None:
    assert not api_keys.create("old", expires_at=100.0)[0].usable(now=200.0)
    assert api_keys.create("new", expires_at=300.0)[0].usable(now=200.0)


def _key(**limits: int) -> api_keys.ApiKey:
    return api_keys.create("limited", **limits)[0]  # type: ignore[arg-type]


def test_requests_per_minute_refuse_until_the_oldest_leaves_the_window() -> None:
    limits, key = KeyLimits(), _key(rpm=2)
    limits.admit(key, 0.0)
    limits.release(key.id, 0.0)
    limits.admit(key, 10.0)
    limits.release(key.id, 10.0)
    with pytest.raises(TooManyRequests) as refused:
        limits.admit(key, 20.0)
    assert refused.value.retry_after == 40  # the first one leaves the window at 60
    assert refused.value.headers() == {"Retry-After": "40"}
    limits.admit(key, WINDOW + 0.5)


def test_tokens_per_minute_count_what_ended_requests_used() -> None:
    limits, key = KeyLimits(), _key(tpm=100)
    limits.admit(key, 0.0)
    limits.release(key.id, 1.0)
    limits.spend(key.id, 60, 1.0)
    limits.admit(key, 2.0)
    limits.release(key.id, 3.0)
    limits.spend(key.id, 50, 3.0)
    with pytest.raises(TooManyRequests) as refused:
        limits.admit(key, 4.0)
    assert refused.value.retry_after == 57  # the 60 tokens leave at 61
    limits.admit(key, 61.5)


def test_concurrent_requests_are_limited_while_they_run() -> None:
    limits, key = KeyLimits(), _key(max_concurrent=1)
    limits.admit(key, 0.0)
    with pytest.raises(TooManyRequests):
        limits.admit(key, 0.1)
    limits.release(key.id, 0.2)
    limits.admit(key, 0.3)
    assert limits.running(key.id) == 1


def test_counts_leave_with_the_window_and_an_idle_key_holds_none() -> None:
    limits, key = KeyLimits(), _key()
    limits.admit(key, 0.0)
    limits.release(key.id, 0.0)
    limits.spend(key.id, 10, 0.0)
    limits.spend(key.id, 5, WINDOW + 1)  # the first request and its tokens leave
    assert limits._use[key.id].token_sum == 5 and not limits._use[key.id].requests
    limits.spend(key.id, 0, 2 * WINDOW + 2)
    assert limits._use == {}


POLICY = LoginPolicy(delay=0.5, max_failures=3, window=100.0, lock=30.0)


def test_attempts_after_wrong_passwords_wait_longer_each_time_then_lock() -> None:
    guard = LoginGuard(POLICY)
    assert guard.locked_for("alice", "1.2.3.4", 0.0) == 0
    assert guard.failed("alice", "1.2.3.4", 1.0) == 0  # a first attempt waits for nothing
    assert guard.failed("alice", "1.2.3.4", 2.0) == 0.5
    assert guard.failed("alice", "1.2.3.4", 3.0) == 1.0
    assert guard.locked_for("alice", "1.2.3.4", 4.0) == pytest.approx(29.0)
    # the lock holds for the address for any user; the user elsewhere is not locked
    assert guard.locked_for("bob", "1.2.3.4", 4.0) > 0
    assert guard.locked_for("alice", "5.6.7.8", 4.0) == 0
    assert guard.locked_for("bob", "5.6.7.8", 4.0) == 0
    assert guard.locked_for("alice", "1.2.3.4", 33.5) == 0


def test_a_user_guessed_at_from_many_addresses_is_slowed_never_locked() -> None:
    guard = LoginGuard(POLICY)
    delays = [guard.failed("admin", f"10.0.0.{i}", float(i)) for i in range(100)]
    # each address failed once: none is locked, and neither is the admin from home
    assert guard.locked_for("admin", "192.168.1.5", 100.0) == 0
    assert all(guard.locked_for("admin", f"10.0.0.{i}", 100.0) == 0 for i in range(100))
    # every attempt for the admin waits longer, up to a bound
    assert delays[:3] == [0, 0.5, 1.0]
    assert delays == sorted(delays) and delays[-1] == USER_DELAY_MOST


def test_failures_leave_the_window_and_a_success_forgets_them() -> None:
    guard = LoginGuard(POLICY)
    guard.failed("alice", "a", 0.0)
    guard.failed("alice", "a", 1.0)
    assert guard.failed("alice", "a", 150.0) == 0  # the first two are out of the window
    guard.failed("alice", "a", 151.0)
    guard.succeeded("alice", "a")
    # this address's failures are forgotten (no lock nears), the user's own still slow
    assert guard.failed("alice", "a", 152.0) == 1.0
    guard.failed("alice", "a", 153.0)
    assert guard.locked_for("alice", "a", 153.0) == 0


def test_an_ipv6_client_counts_by_its_64_an_ipv4_one_by_itself() -> None:
    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:bbbb::9")
    assert address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1")
    assert address_key("::ffff:10.0.0.1") == address_key("10.0.0.1") == "10.0.0.1"
    assert address_key("not an address") == "not an address"


def test_the_database_keeps_users_sessions_keys_and_usage(tmp_path: Path) -> None:
    db = Database(tmp_path)
    assert db.add_user("alice", hash_password("pw-alice-1"))
    assert not db.add_user("alice", "x")
    with pytest.raises(LastUser):
        db.delete_user("alice")
    db.add_session(b"h" * 32, "alice", "csrf", expires_at=9e9)
    session = db.session(b"h" * 32)
    assert session is not None and session.username == "alice" and session.csrf == "csrf"
    assert db.set_password("alice", hash_password("pw-alice-2"))
    assert db.session(b"h" * 32) is None  # a new password ends the sessions
    record, _ = api_keys.create("ci", models=("m",), rpm=5)
    db.add_key(record)
    assert db.key(record.id) == record
    db.add_usage([UsageRow("2026-12-03", record.id, "m", 1, 10, 20)], {record.id: 5.0})
    db.add_usage([UsageRow("2026-12-03", record.id, "m", 2, 1, 2)], {record.id: 4.0})
    assert db.usage("2026-12-01") == [UsageRow("2026-12-03", record.id, "m", 3, 11, 22)]
    assert db.key(record.id).last_used_at == 5.0  # type: ignore[union-attr]
    assert db.revoke_key(record.id) and not db.revoke_key(record.id)
    assert db.integrity() == "ok"
    db.close()
    reopened = Database(tmp_path)  # the schema is migrated once, then reused
    assert [u["username"] for u in reopened.users()] == ["alice"]
    reopened.close()


def test_api_keys_are_required_by_default_unless_only_this_machine_can_call() -> None:
    from coderai.front.auth.gate import requires_api_key

    assert not requires_api_key(None, "127.0.0.1")
    assert not requires_api_key(None, "::1") and not requires_api_key(None, "localhost")
    assert requires_api_key(None, "0.0.0.0") and requires_api_key(None, "192.168.1.5")
    assert requires_api_key(True, "127.0.0.1") and not requires_api_key(False, "0.0.0.0")
