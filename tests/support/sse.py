"""One reader of Server-Sent Events for every test and benchmark.

OpenAI's streams are one `data:` line per event, so a line is enough to read one:
`event()`, `events()` for a whole body, and `DATA` and `is_content_delta()` for a
benchmark's hot loop, which reads raw lines without decoding them. Anthropic's Messages,
OpenAI's Responses and the console's feeds name their events (`event:`) and send
comments (`:`): `Parser` reads those, and OpenAI's too, as frames, from chunks as they
arrive (`iter_frames()`, `aiter_frames()`) or from a whole body (`frames()`, `one()`,
`named_events()`)."""

from __future__ import annotations

import codecs
import contextlib
import json
import threading
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx

#: what `event()` returns for the `data: [DONE]` terminator
DONE: dict[str, Any] = {"done": True}
#: how a `data:` line starts as the front writes it (one space after the colon): a hot
#: loop tests raw lines against it rather than decode each one
DATA = b"data: "
_DATA_OBJECT = DATA + b"{"


def event(line: str | bytes) -> dict[str, Any] | None:
    """The event of one `data: ...` line (DONE for the terminator), or None for any other
    line (blank separators, comments)."""
    text = line.decode() if isinstance(line, bytes) else line
    if not text.startswith("data: "):
        return None
    data = text[6:].strip()
    if data == "[DONE]":
        return DONE
    parsed: dict[str, Any] = json.loads(data)
    return parsed


def events(body: bytes | str) -> list[dict[str, Any]]:
    """Every event of a whole SSE body."""
    text = body.decode() if isinstance(body, bytes) else body
    return [e for line in text.split("\n") if (e := event(line)) is not None]


def content(evs: list[dict[str, Any]]) -> str:
    """The text the events carry: chat deltas' content, or completions' text."""
    out = []
    for e in evs:
        for choice in e.get("choices") or []:
            out.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
    return "".join(out)


def is_error(e: dict[str, Any] | None) -> bool:
    return e is not None and "error" in e


def is_content_delta(line: bytes) -> bool:
    """Whether a raw line is a chat chunk with text in it, neither the role's opening nor
    the final empty delta. It is told from the bytes alone, so that a benchmark timing
    each delta spends little of the machine it measures on reading them."""
    return line.startswith(_DATA_OBJECT) and b'"content"' in line and b'"role"' not in line


@dataclass(frozen=True, slots=True)
class Frame:
    """One thing a stream said: an event, with its `event:` name ("" where it has none,
    as in OpenAI's streams) and its `data:` lines joined; or a comment (keep-alives, a
    prompt's progress), with its text in `comment` and neither name nor data."""

    name: str = ""
    data: str = ""
    comment: str | None = None

    def json(self) -> Any:
        """The data as JSON, DONE for OpenAI's terminator (not JSON), as `event()` reads
        it."""
        return DONE if self.data == "[DONE]" else json.loads(self.data)


class Parser:
    """Frames from a stream's pieces as they arrive, bytes or text, cut anywhere: inside
    a line, between `\\r` and `\\n`, inside a UTF-8 character. `feed()` returns the
    frames a piece completes and keeps the rest for the next one."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._rest = ""  # the start of a line whose end has not come yet
        self._name = ""
        self._data: list[str] = []

    def feed(self, piece: bytes | str) -> list[Frame]:
        """The frames this piece completes; what it leaves unfinished waits for the next."""
        text = self._decoder.decode(piece) if isinstance(piece, bytes) else piece
        # split on "\n" alone: str.splitlines() would also split JSON text that holds
        # U+2028 and other separators a JSON writer may leave unescaped
        *lines, self._rest = (self._rest + text).split("\n")
        return [f for line in lines if (f := self.line(line.removesuffix("\r"))) is not None]

    def line(self, line: str) -> Frame | None:
        """Take one whole line, without its end (as httpx's `iter_lines()` gives them): the
        frame it completes, if any. A comment is a frame at once, so that a reader sees a
        keep-alive when it comes."""
        if not line:
            return self._end()
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if not field:
            return Frame(comment=value)
        if field == "event":
            self._name = value
        elif field == "data":
            self._data.append(value)
        return None  # `id:`, `retry:`: nothing a test here reads

    def _end(self) -> Frame | None:
        """A blank line ends an event; one with no `data:` line is none (the standard's
        rule), as after a comment."""
        frame = Frame(self._name, "\n".join(self._data)) if self._data else None
        self._name, self._data = "", []
        return frame

    @property
    def pending(self) -> bool:
        """Whether it holds part of a frame: a stream that ends now was cut inside one."""
        undecoded, _ = self._decoder.getstate()
        return bool(self._rest or self._name or self._data or undecoded)


def iter_frames(pieces: Iterable[bytes | str]) -> Iterator[Frame]:
    """The frames of a stream read by a blocking client, each as soon as its piece came:
    httpx's `iter_bytes()`, a urllib or http.client response. Not httpx's `iter_lines()`,
    which drops the line ends that say where a line stops."""
    parser = Parser()
    for piece in pieces:
        yield from parser.feed(piece)


async def aiter_frames(pieces: AsyncIterable[bytes]) -> AsyncIterator[Frame]:
    """The frames of a stream aiohttp reads (`r.content`, line by line, or
    `r.content.iter_any()`), each as soon as its piece came."""
    parser = Parser()
    async for piece in pieces:
        for frame in parser.feed(piece):
            yield frame


def frames(body: bytes | str) -> list[Frame]:
    """Every frame of a whole body. One that ends inside a frame was cut, which a test
    wants to hear about rather than lose the frame quietly: that is an error."""
    parser = Parser()
    found = parser.feed(body)
    if parser.pending:
        raise ValueError(f"the body ends inside a frame, after {found[-1:]}")
    return found


def one(piece: bytes | str) -> Frame:
    """The one frame a piece holds, whole and alone: what a writer of single events must
    give (the broker relays one event per chunk, the log book hands one per line)."""
    found = frames(piece)
    if len(found) != 1:
        raise ValueError(f"{len(found)} frames where one was due: {piece!r}")
    return found[0]


def named_events(body: bytes | str) -> list[tuple[str, Any]]:
    """(name, data) of each event of a whole body of named events: Anthropic's, the
    Responses API's, the console's. A comment or a nameless event there is an error, as
    the renderers these read write neither."""
    found = frames(body)
    if any(f.comment is not None or not f.name for f in found):
        raise ValueError(f"a comment or a nameless event among named ones: {found}")
    return [(f.name, f.json()) for f in found]


class BackgroundChat:
    """A long streamed chat read on its own thread: `events` grows as they arrive. stop()
    leaves the stream at its next line; a stream the server cuts (at its shutdown) just
    ends the reader."""

    def __init__(self, url: str, model: str, max_tokens: int = 10_000) -> None:
        self.events: list[dict[str, Any]] = []
        self._stop = threading.Event()
        body = {"model": model, "stream": True, "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": "x"}]}  # fmt: skip
        self.thread = threading.Thread(target=self._read, args=(url, body), daemon=True)
        self.thread.start()

    def _read(self, url: str, body: dict[str, Any]) -> None:
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r,
        ):
            for line in r.iter_lines():
                if (e := event(line)) is not None:
                    self.events.append(e)
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()


async def stream_chat(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[str, list[dict[str, Any]]]:
    """POST a streaming chat request; return the content and every parsed event."""
    evs: list[dict[str, Any]] = []
    async with session.post(url + "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if (e := event(line)) is not None:
                evs.append(e)
    return content(evs), evs
