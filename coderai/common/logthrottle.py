"""A log line that cannot flood the log: at most one per interval, with a count of the
lines it held back (a flood of bad bus frames once wrote 166 MB of warnings)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

DEFAULT_INTERVAL = 10.0


class ThrottledLog:
    def __init__(
        self,
        logger: logging.Logger,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._next = float("-inf")
        self.suppressed = 0

    def warning(self, message: str, *args: object) -> bool:
        """Log now if the interval has passed since the last line; returns whether it did."""
        now = self._clock()
        if now < self._next:
            self.suppressed += 1
            return False
        if self.suppressed:
            message += f" ({self.suppressed} similar lines suppressed)"
            self.suppressed = 0
        self._logger.warning(message, *args)
        self._next = now + self._interval
        return True
