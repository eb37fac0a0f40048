"""The front's handle on coderai.db (StateStore) in a real folder: the database opens on
its own thread, every call runs there, and nothing runs once it is closed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from coderai.front.auth.state_store import StateStore
from coderai.state.database import FILENAME, Database, LastUser


def test_a_store_not_yet_opened_refuses_work_without_touching_the_folder(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    store = StateStore(state_dir)

    async def scenario() -> None:
        try:
            with pytest.raises(RuntimeError, match="not open"):
                await store.run(lambda db: db.users())
        finally:
            await store.close()  # closing a store never opened is harmless

    asyncio.run(scenario())
    assert not state_dir.exists()


def test_opening_creates_the_database_in_the_state_folder(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    store = StateStore(state_dir)

    async def scenario() -> list[dict[str, object]]:
        await store.open()
        try:
            return await store.run(lambda db: db.users())
        finally:
            await store.close()

    assert asyncio.run(scenario()) == []
    assert (state_dir / FILENAME).is_file()


def test_work_runs_on_the_one_state_thread_never_on_the_loops(tmp_path: Path) -> None:
    store = StateStore(tmp_path)

    def where(db: Database) -> tuple[int, str]:
        return threading.get_ident(), threading.current_thread().name

    async def scenario() -> tuple[int, list[tuple[int, str]]]:
        await store.open()
        try:
            ran = [await store.run(where) for _ in range(3)]
            return threading.get_ident(), ran
        finally:
            await store.close()

    loop_thread, ran = asyncio.run(scenario())
    assert len({ident for ident, _ in ran}) == 1
    ((ident, name),) = set(ran)
    assert ident != loop_thread
    assert name.startswith("coderai-state")


def test_calls_asked_for_at_once_run_one_after_another_in_order(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    ran: list[tuple[int, int]] = []

    def note(i: int) -> int:
        ran.append((i, threading.get_ident()))
        return i

    def asked(i: int) -> Callable[[Database], int]:
        return lambda db: note(i)

    async def scenario() -> list[int]:
        await store.open()
        try:
            return list(await asyncio.gather(*(store.run(asked(i)) for i in range(50))))
        finally:
            await store.close()

    assert asyncio.run(scenario()) == list(range(50))
    assert [i for i, _ in ran] == list(range(50))
    assert len({thread for _, thread in ran}) == 1  # one thread, one connection


def test_what_the_work_raises_reaches_the_caller(tmp_path: Path) -> None:
    store = StateStore(tmp_path)

    async def scenario() -> None:
        await store.open()
        try:
            assert await store.run(lambda db: db.add_user("admin", "scrypt$hash"))
            with pytest.raises(LastUser):
                await store.run(lambda db: db.delete_user("admin"))
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_closed_store_refuses_work_and_its_writes_are_kept(tmp_path: Path) -> None:
    first = StateStore(tmp_path)

    async def write_then_close() -> None:
        await first.open()
        assert await first.run(lambda db: db.add_user("admin", "scrypt$hash"))
        await first.close()
        with pytest.raises(RuntimeError, match="not open"):
            await first.run(lambda db: db.users())
        await first.close()  # a second close finds nothing to close

    asyncio.run(write_then_close())
    # its connection is closed: SQLite folds the write-ahead log back into the file
    assert not (tmp_path / f"{FILENAME}-wal").exists()

    second = StateStore(tmp_path)

    async def read_again() -> str | None:
        await second.open()
        try:
            return await second.run(lambda db: db.password_hash("admin"))
        finally:
            await second.close()

    assert asyncio.run(read_again()) == "scrypt$hash"
