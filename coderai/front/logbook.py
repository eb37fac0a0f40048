"""The console's logs: the recent lines of the front ("front") and of each engine (by name).

The front's own log records come in through `LogBookHandler`; each engine's stdout and
stderr through an `OutputRelay` on the pipe the supervisor gives it. Every new line goes to
the console's live feed (`log` events) and to the streams following its source.

The book is the event loop's: lines added from another thread (logging inside
`asyncio.to_thread` work, the --single-process engine's thread) are handed to the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import threading
from collections import deque
from collections.abc import AsyncGenerator, Iterable, Iterator
from typing import BinaryIO

from coderai.front.live_feed import Subscriber, frame

FRONT = "front"
#: lines kept per source
KEEP = 2000
#: longest line kept whole; a longer one is kept as pieces of this many bytes
MAX_LINE = 64 * 1024
#: bytes taken from an engine's pipe at a time
READ_SIZE = 64 * 1024


class LogBook:
    """Made on the event loop, which then owns it."""

    def __init__(self, engines: Iterable[str], keep: int = KEEP) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._lines: dict[str, deque[str]] = {
            source: deque(maxlen=keep) for source in (FRONT, *engines)
        }
        self._followers: dict[str, set[Subscriber]] = {source: set() for source in self._lines}
        self._ended = False

    def sources(self) -> list[str]:
        return list(self._lines)

    def lines(self, source: str, n: int | None = None) -> list[str]:
        """The source's last `n` lines (all it keeps when None), oldest first."""
        kept = self._lines[source]
        if n is None or n >= len(kept):
            return list(kept)
        return list(itertools.islice(kept, len(kept) - n, None))

    def add(self, source: str, line: str) -> None:
        """Any thread."""
        if threading.get_ident() == self._loop_thread:
            self._append(source, line)
            return
        # a line logged after the loop closed has no one left to show it to
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._append, source, line)

    def _append(self, source: str, line: str) -> None:
        self._lines[source].append(line)
        followers = self._followers[source]
        if followers:
            encoded = _log_event(source, line)
            for follower in followers:
                follower.put(encoded)

    async def follow(
        self, source: str, recent: int | None = None
    ) -> AsyncGenerator[list[bytes], None]:
        """Batches of SSE `log` events of one source: its last `recent` lines (maybe none),
        then the new ones as they come, until `end_streams`. A follower that falls behind
        loses the oldest and is told so (`Subscriber`), so it never holds the front's memory."""
        follower = Subscriber()
        self._followers[source].add(follower)
        recent_lines = [_log_event(source, line) for line in self.lines(source, recent)]
        try:
            async for batch in follower.batches(recent_lines, lambda: self._ended):
                yield batch
        finally:
            self._followers[source].discard(follower)

    def end_streams(self) -> None:
        """End every follow (the server is shutting down); lines are still kept."""
        self._ended = True
        for followers in self._followers.values():
            for follower in followers:
                follower.wake.set()


def _log_event(source: str, line: str) -> bytes:
    return frame("log", {"source": source, "line": line})


class LogBookHandler(logging.Handler):
    """This process's log records, formatted, into the book's "front" source, a line each."""

    def __init__(self, book: LogBook) -> None:
        super().__init__()
        self.book = book

    def emit(self, record: logging.LogRecord) -> None:
        try:
            for line in self.format(record).splitlines():
                self.book.add(FRONT, line)
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def capturing(book: LogBook) -> Iterator[None]:
    """While inside, every log record of this process also goes to the book, formatted as
    its terminal shows it (by the root handler `logging.basicConfig` made)."""
    root = logging.getLogger()
    handler = LogBookHandler(book)
    handler.setFormatter(next((h.formatter for h in root.handlers if h.formatter), None))
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def take_lines(data: bytes, longest: int = MAX_LINE) -> tuple[list[bytes], bytes]:
    """The complete lines at the start of `data`, without their newlines (one longer than
    `longest` bytes comes as pieces of that length), and the unfinished rest."""
    lines: list[bytes] = []
    start = 0
    while True:
        end = data.find(b"\n", start, start + longest + 1)
        if end >= 0:
            lines.append(data[start:end])
            start = end + 1
        elif len(data) - start > longest:
            lines.append(data[start : start + longest])
            start += longest
        else:
            return lines, data[start:]


class OutputRelay:
    """Reads one engine's output pipe on the event loop as soon as it is written, so the
    engine never waits on a full pipe: what it wrote is echoed unchanged to `echo` (the
    front's stderr, where it went before the console kept it) and each line is kept in the
    book under the engine's name. Owns the pipe's read end (`fd`)."""

    def __init__(self, fd: int, source: str, book: LogBook, echo: BinaryIO) -> None:
        self._fd = fd
        self._source = source
        self._book = book
        self._echo = echo
        self._rest = b""
        self._loop = asyncio.get_running_loop()
        #: done once the pipe is closed: every process holding its write end has exited
        #: (the engine, and any child that inherited it), or close() was called
        self.closed: asyncio.Future[None] = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._read)

    def _read(self) -> None:
        try:
            chunk = os.read(self._fd, READ_SIZE)
        except BlockingIOError:
            return
        if not chunk:
            self.close()
            return
        data = self._rest + chunk
        lines, self._rest = take_lines(data)
        self._pass_on(data[: len(data) - len(self._rest)], lines)

    def _pass_on(self, raw: bytes, lines: list[bytes]) -> None:
        # the front's stderr may be gone (a closed terminal): the console still gets the lines
        with contextlib.suppress(OSError, ValueError):
            self._echo.write(raw)
            self._echo.flush()
        for line in lines:
            self._book.add(self._source, line.decode(errors="replace"))

    def close(self) -> None:
        """Stop reading: at the pipe's end, or at shutdown for a pipe a child the engine left
        behind still holds. An unfinished last line is passed on as it is."""
        if self.closed.done():
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        if self._rest:
            self._pass_on(self._rest, [self._rest])
            self._rest = b""
        self.closed.set_result(None)
