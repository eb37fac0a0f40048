"""Streaming load for the GPU check (gpu_check.py): N chat completions at once through the
front, each streamed, timed per token on the client's clock, and the front's and engines'
CPU time read around each level. aiohttp only: the GPU machine has it, not the SDKs."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import psutil


@dataclass
class Stream:
    ttft: float = 0.0
    #: chunks with text: a slow front merges several tokens into one (engine/outbox.py)
    chunks: int = 0
    #: the tokens the stream's usage counts
    tokens: int = 0
    seconds: float = 0.0
    gaps: list[float] = field(default_factory=list)
    error: str | None = None


async def one(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Stream:
    out = Stream()
    start = time.perf_counter()
    last = start
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as answer:
            if answer.status != 200:
                out.error = f"{answer.status}: {(await answer.text())[:200]}"
                return out
            async for raw in answer.content:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("error"):
                    out.error = str(chunk["error"])[:200]
                    break
                if chunk.get("usage"):
                    out.tokens = int(chunk["usage"].get("completion_tokens") or 0)
                choices = chunk.get("choices") or []
                if not (choices and choices[0].get("delta", {}).get("content")):
                    continue
                now = time.perf_counter()
                if out.chunks == 0:
                    out.ttft = now - start
                else:
                    out.gaps.append(now - last)
                last = now
                out.chunks += 1
    except (TimeoutError, aiohttp.ClientError) as exc:
        out.error = f"{exc.__class__.__name__}: {exc}"
    out.seconds = time.perf_counter() - start
    return out


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


@dataclass
class Level:
    model: str
    concurrency: int
    streams: int
    errors: list[str]
    tokens: int
    chunks: int
    #: streams that ended before max_tokens
    short: int
    seconds: float
    tokens_per_second: float
    ttft_p50_ms: float
    itl_p50_ms: float
    itl_p90_ms: float
    front_cpu_us_per_token: float
    engine_cpu_us_per_token: float


async def level(url: str, model: str, concurrency: int, max_tokens: int, front: int,
                engines: list[int], logit_bias: dict[str, float],
                seconds_left: float = 300) -> Level:  # fmt: skip
    """`concurrency` streams of `max_tokens` tokens at once: tokens as the streams' usage
    counts them; the gaps are between chunks with text (one token each unless the front
    fell behind and the engine merged several)."""
    body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0.8,
            "messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
            "logit_bias": logit_bias, "stream_options": {"include_usage": True}}  # fmt: skip
    timeout = aiohttp.ClientTimeout(total=max(5.0, seconds_left))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        front_before, engines_before = _cpu([front]), _cpu(engines)
        start = time.perf_counter()
        streams = await asyncio.gather(*(one(session, url, body) for _ in range(concurrency)))
        seconds = time.perf_counter() - start
        front_cpu, engine_cpu = _cpu([front]) - front_before, _cpu(engines) - engines_before
    tokens = sum(s.tokens for s in streams)
    gaps = sorted(g for s in streams for g in s.gaps)
    firsts = [s.ttft for s in streams if s.chunks]

    def pick(values: list[float], share: float) -> float:
        """The `share` quantile (nearest rank), in ms."""
        if not values:
            return 0.0
        return round(values[round(share * (len(values) - 1))] * 1000, 2)

    per_token = 1e6 / tokens if tokens else 0.0
    short = sum(1 for s in streams if s.tokens < max_tokens)
    return Level(model, concurrency, len(streams), [s.error for s in streams if s.error],
                 tokens, sum(s.chunks for s in streams), short, round(seconds, 3),
                 round(tokens / seconds, 1) if seconds else 0.0,
                 round(statistics.median(firsts) * 1000, 1) if firsts else 0.0,
                 pick(gaps, 0.5), pick(gaps, 0.9), round(front_cpu * per_token, 1),
                 round(engine_cpu * per_token, 1))  # fmt: skip


def levels(url: str, model: str, concurrencies: list[int], max_tokens: int, front: int,
           engines: list[int], logit_bias: dict[str, float],
           deadline: float) -> list[dict[str, Any]]:  # fmt: skip
    """A warm-up stream, then each level in turn, as far as `deadline` (a monotonic time)
    lets them: a level still running there ends with its streams' errors."""
    asyncio.run(level(url, model, 1, 4, front, engines, logit_bias, deadline - time.monotonic()))
    found = []
    for n in concurrencies:
        left = deadline - time.monotonic()
        if left < 5:
            break
        found.append(asdict(asyncio.run(level(url, model, n, max_tokens, front, engines,
                                              logit_bias, left))))  # fmt: skip
    return found
