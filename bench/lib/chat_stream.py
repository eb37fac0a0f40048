"""A streamed chat completion read as a benchmark needs it: when each content delta came,
the text, and the usage the last chunk carries (any OpenAI-compatible server)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.support.sse import DONE, event


@dataclass
class Streamed:
    #: perf_counter() at the first and the last content delta (0 if none came)
    first: float = 0.0
    last: float = 0.0
    pieces: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


async def stream_chat(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Streamed:
    out = Streamed()
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"{url}: {response.status} {await response.text()}")
        async for line in response.content:
            chunk = event(line)
            if chunk is None or chunk is DONE:
                continue
            for choice in chunk.get("choices", []):
                if choice.get("delta", {}).get("content"):
                    out.last = time.perf_counter()
                    out.first = out.first or out.last
                    out.pieces.append(choice["delta"]["content"])
            out.usage = chunk.get("usage") or out.usage
    return out
