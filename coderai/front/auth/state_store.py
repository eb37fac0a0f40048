"""The front's one handle on coderai.db: a `Database` that lives on its own thread.

SQLite calls block (a commit waits for fsync), so none runs on the event loop: each is
handed to the one state thread, in the order they were asked for. One thread, one
connection, one owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from coderai.state.database import Database

T = TypeVar("T")


class StateStore:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="coderai-state")
        self._db: Database | None = None

    async def open(self) -> None:
        self._db = await self._on_thread(lambda: Database(self.state_dir))

    async def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await self._on_thread(db.close)
        self._thread.shutdown(wait=False)

    async def run(self, work: Callable[[Database], T]) -> T:
        """`work(db)` on the state thread."""
        db = self._db
        if db is None:
            raise RuntimeError("the state database is not open")
        return await self._on_thread(lambda: work(db))

    async def _on_thread(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)
