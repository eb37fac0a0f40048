"""A minimal SSE reader over aiohttp for tests that need many concurrent streams."""

from __future__ import annotations

import json
from typing import Any

import aiohttp


async def stream_chat(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[str, list[dict[str, Any]]]:
    """POST a streaming chat request; return the content and every parsed event."""
    events: list[dict[str, Any]] = []
    async with session.post(url + "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status == 200, await r.text()
        buffer = b""
        async for chunk in r.content.iter_any():
            buffer += chunk
            *complete, buffer = buffer.split(b"\n\n")
            for raw in complete:
                data = raw.removeprefix(b"data: ")
                if data == b"[DONE]":
                    events.append({"done": True})
                else:
                    events.append(json.loads(data))
    text = "".join(
        e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices")
    )
    return text, events
