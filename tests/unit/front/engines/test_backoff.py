from __future__ import annotations

from coderai.front.engines.host import FLAPPING_AFTER, EngineStatus
from coderai.front.engines.supervisor import MAX_BACKOFF_SECONDS, backoff_delay, count_failure


def test_the_first_failure_restarts_at_once_then_delays_double() -> None:
    assert [backoff_delay(n) for n in range(1, 6)] == [0.0, 0.5, 1.0, 2.0, 4.0]


def test_the_delay_is_capped() -> None:
    assert backoff_delay(50) == MAX_BACKOFF_SECONDS


def test_failures_count_only_deaths_soon_after_start() -> None:
    assert count_failure(2, lived_seconds=1.0, requested=False) == 3
    assert count_failure(2, lived_seconds=3600.0, requested=False) == 1


def test_a_requested_restart_is_not_a_failure() -> None:
    assert count_failure(5, lived_seconds=0.1, requested=True) == 0


def test_repeated_failures_at_start_are_flapping() -> None:
    assert not EngineStatus(failures=FLAPPING_AFTER - 1).flapping
    assert EngineStatus(failures=FLAPPING_AFTER).flapping
