"""One reader of the front's SSE streams for every test: whole bodies, line iterators and
chunks as they arrive all go through `event()`."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

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
