"""API usage per key, model and day (UTC): counted in memory as requests end, written to
the database in one transaction every few seconds and at shutdown, so the request path
never waits for a disk write. The ledger also keeps what each key spent this month, which
its budgets are checked against (budgets.py), and counts usage in /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from prometheus_client import Counter

from coderai.front.auth.activity import Ticket
from coderai.front.auth.budgets import Spending, day_of, month_start
from coderai.front.auth.state_store import StateStore
from coderai.state.database import UsageRow

log = logging.getLogger("coderai.front")

#: how often counts are written; what a crash can lose
FLUSH_SECONDS = 2.0


class UsageLedger:
    def __init__(self, store: StateStore, counters: tuple[Counter, Counter] | None = None) -> None:
        self.store = store
        #: /metrics: requests by key id and model, tokens by key id, model and kind
        self.counters = counters
        self.spending = Spending()
        self._pending: dict[tuple[str, str, str], list[int]] = {}
        self._last_used: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def record(self, ticket: Ticket) -> None:
        """Count an ended request that named a model."""
        if ticket.model is None:
            return
        key_id = ticket.key.id if ticket.key is not None else ""
        prompt, completion = ticket.tokens()
        counts = self._pending.setdefault((day_of(ticket.started_at), key_id, ticket.model),
                                          [0, 0, 0])  # fmt: skip
        counts[0] += 1
        counts[1] += prompt
        counts[2] += completion
        self.spending.add(key_id, day_of(ticket.started_at), prompt + completion)
        if key_id:
            self._last_used[key_id] = time.time()
        if self.counters is not None:
            requests, tokens = self.counters
            requests.labels(key_id, ticket.model).inc()
            tokens.labels(key_id, ticket.model, "prompt").inc(prompt)
            tokens.labels(key_id, ticket.model, "completion").inc(completion)

    async def flush(self) -> None:
        if not self._pending and not self._last_used:
            return
        pending, self._pending = self._pending, {}
        last_used, self._last_used = self._last_used, {}
        rows = [UsageRow(day, key, model, *counts) for (day, key, model), counts in pending.items()]
        try:
            await self.store.run(lambda db: db.add_usage(rows, last_used))
        except Exception:
            self._restore(pending, last_used)  # the next flush tries them again
            raise

    def _restore(
        self, pending: dict[tuple[str, str, str], list[int]], last_used: dict[str, float]
    ) -> None:
        for where, counts in pending.items():
            mine = self._pending.setdefault(where, [0, 0, 0])
            for i, count in enumerate(counts):
                mine[i] += count
        for key_id, at in last_used.items():
            self._last_used[key_id] = max(at, self._last_used.get(key_id, at))

    async def rows(self, days: int) -> list[UsageRow]:
        """Usage of the last `days` days, today included, with what is still in memory."""
        await self.flush()
        since = day_of(time.time() - (days - 1) * 86400)
        return await self.store.run(lambda db: db.usage(since))

    async def start(self) -> None:
        """Read what keys spent this month (before any request is counted), then write
        counts every FLUSH_SECONDS."""
        since = month_start(time.time())
        self.spending.load(await self.store.run(lambda db: db.tokens_by_day(since)))
        self._task = asyncio.get_running_loop().create_task(self._flushing())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _flushing(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            try:
                await self.flush()
            except Exception:  # e.g. a full disk: counts wait in memory for the next try
                log.exception("usage could not be written to the database")
