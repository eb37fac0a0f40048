from __future__ import annotations

import logging

import pytest

from coderai.common.logthrottle import ThrottledLog


def test_at_most_one_line_per_interval_then_the_count_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    throttled = ThrottledLog(logging.getLogger("t"), interval=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING):
        logged = [throttled.warning("bad frame %d", i) for i in range(1000)]
        now[0] = 10.0
        throttled.warning("bad frame %d", 1000)
    assert logged.count(True) == 1
    assert [r.getMessage() for r in caplog.records] == [
        "bad frame 0",
        "bad frame 1000 (999 similar lines suppressed)",
    ]
