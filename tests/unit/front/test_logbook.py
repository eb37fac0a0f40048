"""The console's log book: bounded recent lines per source, handed to the live feed and to
the streams following a source, from any thread; engines' pipes read into it line by line."""

from __future__ import annotations

import asyncio
import io
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from coderai.front.live_feed import BACKLOG
from coderai.front.logbook import (
    FRONT,
    MAX_LINE,
    LogBook,
    LogBookHandler,
    OutputRelay,
    take_lines,
)
from tests.support.sse import one

T = TypeVar("T")


def run(scenario: Callable[[], Awaitable[T]], debug: bool = False) -> T:
    async def bounded() -> T:
        async with asyncio.timeout(10):
            return await scenario()

    return asyncio.run(bounded(), debug=debug)


def decoded(batch: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) of each SSE frame, one whole frame to each piece."""
    return [(frame.name, frame.json()) for frame in map(one, batch)]


def test_a_source_keeps_only_its_newest_lines() -> None:
    async def scenario() -> list[str]:
        book = LogBook(["alpha"], keep=3)
        for i in range(5):
            book.add("alpha", f"line {i}")
        return book.lines("alpha")

    assert run(scenario) == ["line 2", "line 3", "line 4"]


def test_lines_gives_the_last_n_oldest_first() -> None:
    async def scenario() -> tuple[list[str], list[str], list[str]]:
        book = LogBook([])
        for i in range(4):
            book.add(FRONT, f"line {i}")
        return book.lines(FRONT, 2), book.lines(FRONT, 0), book.lines(FRONT, 10)

    last_two, none, all_kept = run(scenario)
    assert last_two == ["line 2", "line 3"]
    assert none == []
    assert all_kept == ["line 0", "line 1", "line 2", "line 3"]


def test_the_sources_are_the_front_and_each_engine_even_before_they_log() -> None:
    async def scenario() -> tuple[list[str], list[str]]:
        book = LogBook(["alpha", "beta"])
        return book.sources(), book.lines("beta")

    assert run(scenario) == (["front", "alpha", "beta"], [])


def test_lines_added_on_another_thread_reach_a_follower_in_order() -> None:
    async def scenario() -> list[str]:
        book = LogBook([])
        follow = book.follow(FRONT, recent=0)
        assert await anext(follow) == []

        def log_from_a_thread() -> None:
            for i in range(500):
                book.add(FRONT, f"line {i}")

        worker = asyncio.create_task(asyncio.to_thread(log_from_a_thread))
        received: list[str] = []
        while len(received) < 500:
            received += [data["line"] for _, data in decoded(await anext(follow))]
        await worker
        await follow.aclose()
        assert book.lines(FRONT) == received
        return received

    # debug mode: the loop refuses to be woken from another thread except threadsafe-ly
    assert run(scenario, debug=True) == [f"line {i}" for i in range(500)]


def test_a_follow_sends_the_recent_lines_then_each_new_one_of_its_source_only() -> None:
    async def scenario() -> list[list[tuple[str, dict[str, Any]]]]:
        book = LogBook(["alpha"])
        book.add("alpha", "old 1")
        book.add("alpha", "old 2")
        follow = book.follow("alpha", recent=1)
        first = await anext(follow)
        book.add(FRONT, "elsewhere")
        book.add("alpha", "new")
        second = await anext(follow)
        await follow.aclose()
        return [decoded(first), decoded(second)]

    assert run(scenario) == [
        [("log", {"source": "alpha", "line": "old 2"})],
        [("log", {"source": "alpha", "line": "new"})],
    ]


def test_a_follower_that_does_not_read_loses_the_oldest_lines_and_is_told() -> None:
    async def scenario() -> list[tuple[str, dict[str, Any]]]:
        book = LogBook([])
        follow = book.follow(FRONT, recent=0)
        assert await anext(follow) == []
        for i in range(BACKLOG + 5):
            book.add(FRONT, f"line {i}")
        batch = await anext(follow)
        await follow.aclose()
        return decoded(batch)

    events = run(scenario)
    assert events[0] == ("lagged", {"dropped": True})
    assert len(events) == 1 + BACKLOG
    assert events[1] == ("log", {"source": FRONT, "line": "line 5"})


def test_ending_the_streams_ends_every_follow() -> None:
    async def scenario() -> list[list[bytes]]:
        book = LogBook([])
        follow = book.follow(FRONT)

        async def read_all() -> list[list[bytes]]:
            return [batch async for batch in follow]

        reader = asyncio.create_task(read_all())
        await asyncio.sleep(0)  # the follow is waiting for lines
        book.end_streams()
        return await reader

    assert run(scenario) == [[]]


def test_the_handler_adds_formatted_records_to_the_front_a_line_each() -> None:
    async def scenario() -> list[str]:
        book = LogBook([])
        handler = LogBookHandler(book)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger = logging.getLogger("coderai.test_logbook")
        logger.addHandler(handler)
        try:
            logger.warning("two\nlines")
        finally:
            logger.removeHandler(handler)
        return book.lines(FRONT)

    assert run(scenario) == ["WARNING coderai.test_logbook: two", "lines"]


def test_take_lines_cuts_a_long_line_and_keeps_the_unfinished_rest() -> None:
    assert take_lines(b"a\nbb\ncc", longest=4) == ([b"a", b"bb"], b"cc")
    assert take_lines(b"0123456789\nx", longest=4) == ([b"0123", b"4567", b"89"], b"x")
    assert take_lines(b"0123", longest=4) == ([], b"0123")
    assert take_lines(b"0123\n", longest=4) == ([b"0123"], b"")


async def _relayed(chunks: list[bytes]) -> tuple[list[str], bytes]:
    """What a relay keeps and echoes of an engine that writes `chunks` and exits."""
    book = LogBook(["alpha"])
    echo = io.BytesIO()
    reading, writing = os.pipe()
    relay = OutputRelay(reading, "alpha", book, echo)

    def engine() -> None:
        with os.fdopen(writing, "wb", buffering=0) as out:
            for chunk in chunks:
                out.write(chunk)

    await asyncio.to_thread(engine)
    await relay.closed
    return book.lines("alpha"), echo.getvalue()


def test_a_relay_keeps_each_line_and_echoes_the_output_unchanged() -> None:
    chunks = [b"first li", b"ne\nsecond\n", b"caf\xc3", b"\xa9\n\xff\n", b"no newline at the end"]
    lines, echoed = run(lambda: _relayed(chunks))
    assert lines == ["first line", "second", "café", "\ufffd", "no newline at the end"]
    assert echoed == b"".join(chunks)


def test_a_relay_splits_a_line_longer_than_the_limit() -> None:
    huge = b"x" * (2 * MAX_LINE + 10)
    lines, echoed = run(lambda: _relayed([huge, b"\nafter\n"]))
    assert [len(line) for line in lines] == [MAX_LINE, MAX_LINE, 10, 5]
    assert echoed == huge + b"\nafter\n"


def test_closing_a_relay_stops_reading_a_pipe_still_held_open() -> None:
    async def scenario() -> tuple[list[str], bool]:
        book = LogBook(["alpha"])
        reading, writing = os.pipe()
        relay = OutputRelay(reading, "alpha", book, io.BytesIO())
        os.write(writing, b"done\nhalf a li")
        async with asyncio.timeout(5):
            while len(book.lines("alpha")) < 1:
                await asyncio.sleep(0.001)
        relay.close()
        try:
            os.write(writing, b"ne\n")
            reader_gone = False
        except BrokenPipeError:
            reader_gone = True
        os.close(writing)
        return book.lines("alpha"), reader_gone and relay.closed.done()

    assert run(scenario) == (["done", "half a li"], True)
