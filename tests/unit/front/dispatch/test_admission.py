"""Who may join the bus, and as what (dispatch/admission.py): the decisions alone, over
plain records. The dispatcher acting on them is driven in test_bus_stateful.py and the
cluster's integration tests."""

from __future__ import annotations

import dataclasses

from coderai.front.dispatch import admission
from coderai.front.dispatch.registry import EngineRecord

ALLOWED = {"KEY": "far"}


def record(name: str = "far", remote_key: str | None = "KEY", pid: int = 10) -> EngineRecord:
    return EngineRecord(b"id", name, 1, pid, "cpu", frozenset({"fake"}), 4,
                        remote_key=remote_key, last_seen=100.0)  # fmt: skip


def refused(
    name: str,
    key: str | None,
    current: EngineRecord | None = None,
    alive: bool = False,
    local: frozenset[str] = frozenset(),
    pid: int = 11,
) -> str | None:
    return admission.name_refused(name, key, pid, current, ALLOWED, set(local), alive)


def test_a_local_engine_joins_unless_its_name_is_a_remote_engines() -> None:
    assert refused("e0", None) is None
    assert refused("e0", None, record("e0", remote_key=None)) is None  # its restart
    assert "remote engine's" in (refused("far", None, record()) or "")


def test_a_remote_engine_joins_only_as_the_name_its_key_was_allowed() -> None:
    assert refused("far", "KEY") is None
    assert "joins as 'far', not 'near'" in (refused("near", "KEY") or "")
    assert "joins as None" in (refused("far", "OTHER") or "")  # a key never allowed
    no_cluster = admission.name_refused("far", "KEY", 1, None, None, set(), False)
    assert "joins as None" in (no_cluster or "")


def test_a_remote_engine_never_takes_a_local_engines_name() -> None:
    assert "local engine's" in (refused("far", "KEY", local=frozenset({"far"})) or "")
    assert "local engine's" in (refused("far", "KEY", record(remote_key=None)) or "")


def test_a_second_process_with_one_key_is_refused_while_the_first_lives() -> None:
    assert "live process (pid 10)" in (refused("far", "KEY", record(), alive=True) or "")
    assert refused("far", "KEY", record(), alive=False) is None  # it was lost: rejoin
    assert refused("far", "KEY", record(pid=11), alive=True) is None  # the same process


def test_alive_means_heard_within_two_beats_and_not_leaving() -> None:
    engine = record()  # last heard at 100.0
    assert admission.alive(engine, now=100.9, heartbeat_interval=0.5)
    assert not admission.alive(engine, now=101.0, heartbeat_interval=0.5)
    assert not admission.alive(dataclasses.replace(engine, draining=True), 100.5, 1.0)
    assert not admission.alive(dataclasses.replace(engine, missing=True), 100.5, 1.0)


def test_a_remote_engines_slots_are_bounded_and_a_local_ones_are_the_fronts() -> None:
    assert admission.own_slots("KEY", 8) == 8
    assert admission.own_slots("KEY", 10**9) == admission.MOST_OWN_SLOTS
    assert admission.own_slots("KEY", 0) is None
    assert admission.own_slots(None, 8) is None


def test_a_revoked_key_is_no_longer_allowed_and_the_token_is_compared_whole() -> None:
    assert admission.still_allowed("KEY", ALLOWED)
    assert not admission.still_allowed("GONE", ALLOWED)
    assert not admission.still_allowed("KEY", None)
    assert admission.token_matches("s3cret", "s3cret")
    assert not admission.token_matches("s3cre", "s3cret")
