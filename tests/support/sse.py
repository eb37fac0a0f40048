"""One reader of the front's SSE streams for every test: whole bodies, line iterators and
chunks as they arrive all go through `event()`."""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

import aiohttp
import httpx

#: what `event()` returns for the `data: [DONE]` terminator
DONE: dict[str, Any] = {"done": True}


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


class BackgroundChat:
    """A long streamed chat read on its own thread: `events` grows as they arrive. stop()
    leaves the stream at its next line; a stream the server cuts (at its shutdown) just
    ends the reader."""

    def __init__(self, url: str, model: str, max_tokens: int = 10_000) -> None:
        self.events: list[dict[str, Any] | None] = []
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
                if line.startswith("data:"):
                    self.events.append(event(line))
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
