"""The soak's load: asyncio clients in their own process sending a mix of requests for a
set time. Each answer is checked against the fake model's deterministic output and written
as one JSON line (kind, outcome, status, seconds, detail); bench/soak.py starts this and
reads what it wrote.

Outcomes that are fine under chaos: completed (the whole answer, exactly the model's),
cancelled (the client left on purpose), error (an explicit error: 503 or 429 with an
OpenAI error envelope, or an error event in the stream) and refused (a bad body answered
400 with an envelope). Every other outcome is a defect: hung (no answer by the deadline),
truncated (a stream that ended without [DONE] or an error event), wrong (text other than
the model's), bad_error (a status chaos does not explain, or an error without its
envelope) and bad_response (an answer of the wrong shape).

    python -m bench.soak_load URL SECONDS OUT [--clients 12] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from coderai.engine.backends.fake import fake_embedding, fake_tokens
from tests.support.server import expected_chat
from tests.support.sse import DONE, event, events

#: no request may take longer under any chaos: past it, it is counted as hung
DEADLINE = 60.0
#: the soak's catalogue (bench/soak.py serves these)
CHAT, EMBED, TOOLS, WIDE = "chat", "embed", "tools", "wide"
EMBEDDING_DIMS = 16
WIDE_TOKEN_CHARS = 256
WIDE_TOKENS = 96
TOOL_ARGS = {"city": "Paris", "days": 3}
TOOL_SCRIPT = "Let me check.<tool_call>\n" + json.dumps(
    {"name": "get_weather", "arguments": TOOL_ARGS}
) + "\n</tool_call>"  # fmt: skip
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
#: bodies that must be refused: (path, raw body, expected status)
BAD_BODIES: list[tuple[str, bytes, int]] = [
    ("/v1/chat/completions", b"{not json", 400),
    ("/v1/chat/completions", b'{"model": "chat", "messages": "hi"}', 400),
    ("/v1/chat/completions", b'{"model": "chat", "messages": [], "frobnicate": 1}', 400),
    ("/v1/chat/completions",
     b'{"model": "chat", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}', 400),
    ("/v1/completions", b'{"model": "chat"}', 400),
    ("/v1/completions", b'{"model": "no-such-model", "prompt": "x"}', 404),
    ("/v1/embeddings", b'{"model": "embed", "input": [""]}', 400),
    ("/v1/embeddings", b'{"model": "embed", "input": [[1, 99999]]}', 400),
]  # fmt: skip
#: how often each kind is sent, relative to the others
WEIGHTS = {
    "chat_stream": 5, "chat_whole": 2, "completion_stream": 2, "completion_whole": 1,
    "embeddings": 2, "tools": 1, "disconnect": 1, "slow_reader": 1, "bad_body": 1,
}  # fmt: skip

Result = dict[str, Any]


class Answer(Exception):
    """How a request ended, raised from deep in a check."""

    def __init__(self, outcome: str, detail: str = "", status: int = 0) -> None:
        super().__init__(outcome)
        self.outcome, self.detail, self.status = outcome, detail, status


def _is_envelope(body: object) -> bool:
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and isinstance(error.get("message"), str) and "type" in error


#: what a valid request may be answered under chaos: no engine can serve it now (503), or
#: the queue is full (429); any other status is a defect
CHAOS_STATUSES = (503, 429)


async def _refused(response: aiohttp.ClientResponse) -> None:
    """A status other than 200 for a valid request: an explicit error if it is one chaos
    explains and it carries the envelope."""
    raw = await response.read()
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if response.status not in CHAOS_STATUSES or not _is_envelope(body):
        raise Answer("bad_error", raw[:200].decode(errors="replace"), response.status)
    raise Answer("error", body["error"]["message"][:120], response.status)


class Stream:
    """One SSE stream read line by line: its content, the finish, and how it ended."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.text = ""
        self.events = 0
        self.finish: str | None = None
        self.done = False

    def take(self, line: bytes) -> None:
        parsed = event(line)
        if parsed is not None:
            self.add(parsed)

    def add(self, parsed: dict[str, Any]) -> None:
        if parsed is DONE:
            self.done = True
            return
        if "error" in parsed:
            if not _is_envelope(parsed):
                raise Answer("bad_error", json.dumps(parsed)[:200])
            raise Answer("error", "in stream: " + parsed["error"]["message"][:100], 200)
        for choice in parsed.get("choices", []):
            piece = choice["delta"].get("content") if self.field == "delta" else choice["text"]
            if piece:
                self.text += piece
                self.events += 1
            self.finish = choice.get("finish_reason") or self.finish


class Client:
    def __init__(self, url: str, session: aiohttp.ClientSession, rng: random.Random) -> None:
        self.url, self.session, self.rng = url, session, rng

    def _chat_body(self, model: str = CHAT, most: int = 48) -> tuple[dict[str, Any], str]:
        content = f"soak {self.rng.randrange(10**6)}"
        tokens, seed = self.rng.randint(4, most), self.rng.randrange(1000)
        messages = [{"role": "user", "content": content}]
        body = {"model": model, "messages": messages, "max_tokens": tokens, "seed": seed}
        width = WIDE_TOKEN_CHARS if model == WIDE else 0
        return body, expected_chat(content, tokens, seed, width)

    def _completion_body(self) -> tuple[dict[str, Any], str]:
        prompt = f"def soak_{self.rng.randrange(10**6)}():"
        tokens, seed = self.rng.randint(4, 48), self.rng.randrange(1000)
        body = {"model": CHAT, "prompt": prompt, "max_tokens": tokens, "seed": seed}
        return body, "".join(fake_tokens(prompt, seed, tokens))

    async def _stream(self, path: str, body: dict[str, Any], want: str, field: str) -> None:
        stream = Stream(field)
        async with self.session.post(self.url + path, json={**body, "stream": True}) as r:
            if r.status != 200:
                await _refused(r)
            try:
                async for line in r.content:
                    stream.take(line)
                    if not want.startswith(stream.text):
                        raise Answer("wrong", f"{stream.text[-40:]!r} is not the model's")
            except aiohttp.ClientPayloadError as exc:
                raise Answer("truncated", f"{exc!r} after {stream.events} events") from None
        if not stream.done:
            raise Answer("truncated", f"no [DONE] after {stream.events} events")
        if stream.text != want or stream.finish != "length":
            raise Answer("wrong", f"{len(stream.text)} of {len(want)} chars, {stream.finish}")

    async def chat_stream(self) -> None:
        body, want = self._chat_body()
        await self._stream("/v1/chat/completions", body, want, "delta")

    async def completion_stream(self) -> None:
        body, want = self._completion_body()
        await self._stream("/v1/completions", body, want, "text")

    async def _whole(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(self.url + path, json=body) as r:
            if r.status != 200:
                await _refused(r)
            answer: dict[str, Any] = await r.json()
            return answer

    async def chat_whole(self) -> None:
        body, want = self._chat_body()
        choice = (await self._whole("/v1/chat/completions", body))["choices"][0]
        if choice["message"]["content"] != want or choice["finish_reason"] != "length":
            raise Answer("wrong", f"{choice['message']['content'][:40]!r}")

    async def completion_whole(self) -> None:
        body, want = self._completion_body()
        choice = (await self._whole("/v1/completions", body))["choices"][0]
        if choice["text"] != want or choice["finish_reason"] != "length":
            raise Answer("wrong", f"{choice['text'][:40]!r}")

    async def embeddings(self) -> None:
        texts = [f"embed {self.rng.randrange(10**6)}" for _ in range(self.rng.randint(1, 4))]
        answer = await self._whole("/v1/embeddings", {"model": EMBED, "input": texts})
        got = [item["embedding"] for item in sorted(answer["data"], key=lambda d: d["index"])]
        want = [fake_embedding(list(t.encode()), EMBEDDING_DIMS) for t in texts]
        if got != want:
            raise Answer("wrong", "vectors differ from the model's")

    async def tools(self) -> None:
        body = {"model": TOOLS, "messages": [{"role": "user", "content": "weather?"}],
                "tools": [TOOL]}  # fmt: skip
        choice = (await self._whole("/v1/chat/completions", body))["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        if (
            choice["finish_reason"] != "tool_calls"
            or [c["function"]["name"] for c in calls] != ["get_weather"]
            or json.loads(calls[0]["function"]["arguments"]) != TOOL_ARGS
        ):
            raise Answer("wrong", json.dumps(choice)[:120])

    async def disconnect(self) -> None:
        """Leave a stream after its first few events."""
        body, want = self._chat_body()
        stream = Stream("delta")
        async with self.session.post(self.url + "/v1/chat/completions",
                                     json={**body, "stream": True}) as r:  # fmt: skip
            if r.status != 200:
                await _refused(r)
            async for line in r.content:
                stream.take(line)
                if not want.startswith(stream.text):
                    raise Answer("wrong", f"{stream.text[-40:]!r} is not the model's")
                if stream.events >= 2 and not stream.done:
                    r.close()
                    raise Answer("cancelled", f"after {stream.events} events")
        # a short answer may come whole in fewer events (deltas merge when a step's
        # output waits): then it was not left, it ended
        if not stream.done or stream.text != want:
            raise Answer("truncated", f"ended after {stream.events} events")

    async def slow_reader(self) -> None:
        """A stream of wide tokens read a little at a time: the front must hold it back."""
        body, want = self._chat_body(WIDE, most=WIDE_TOKENS)
        stream = Stream("delta")
        async with self.session.post(self.url + "/v1/chat/completions",
                                     json={**body, "stream": True}) as r:  # fmt: skip
            if r.status != 200:
                await _refused(r)
            raw = b""
            try:
                while piece := await r.content.read(2048):
                    raw += piece
                    await asyncio.sleep(0.002)
            except aiohttp.ClientPayloadError as exc:
                raise Answer("truncated", repr(exc)) from None
        for parsed in events(raw):
            stream.add(parsed)
        if not stream.done or stream.text != want:
            raise Answer("truncated" if not stream.done else "wrong", f"{len(stream.text)} chars")

    async def bad_body(self) -> None:
        path, raw, status = self.rng.choice(BAD_BODIES)
        headers = {"Content-Type": "application/json"}
        async with self.session.post(self.url + path, data=raw, headers=headers) as r:
            body = await r.read()
            if r.status == status and _is_envelope(json.loads(body)):
                raise Answer("refused", path, r.status)
            if r.status in CHAOS_STATUSES and _is_envelope(json.loads(body)):
                raise Answer("error", "no engine for it now", r.status)  # chaos
            raise Answer("bad_error", f"{path} {raw[:40]!r} -> {r.status}", r.status)


async def one(client: Client, kind: str) -> Result:
    start = time.monotonic()
    call: Callable[[], Awaitable[None]] = getattr(client, kind)
    try:
        async with asyncio.timeout(DEADLINE):
            await call()
        outcome, detail, status = "completed", "", 200
    except Answer as answer:
        outcome, detail, status = answer.outcome, answer.detail, answer.status
    except TimeoutError:
        outcome, detail, status = "hung", f"no answer in {DEADLINE:.0f} s", 0
    except aiohttp.ContentTypeError as exc:  # a 200 that is not JSON
        outcome, detail, status = "bad_response", repr(exc)[:120], 0
    except (aiohttp.ClientError, ConnectionError) as exc:
        # the connection broke without an error event: nothing told the client why
        outcome, detail, status = "truncated", repr(exc)[:120], 0
    except Exception as exc:  # an answer of the wrong shape: a defect, and the load goes on
        outcome, detail, status = "bad_response", repr(exc)[:120], 0
    return {"kind": kind, "outcome": outcome, "status": status, "detail": detail,
            "at": start, "seconds": time.monotonic() - start}  # fmt: skip


async def run(url: str, seconds: float, out: Path, clients: int, seed: int) -> None:
    kinds = list(WEIGHTS)
    weights = list(WEIGHTS.values())
    end = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=None)
    with out.open("w") as sink:
        async with aiohttp.ClientSession(timeout=timeout, read_bufsize=4096) as session:

            async def worker(index: int) -> None:
                rng = random.Random(seed * 1000 + index)
                client = Client(url, session, rng)
                while time.monotonic() < end:
                    result = await one(client, rng.choices(kinds, weights)[0])
                    sink.write(json.dumps(result) + "\n")

            await asyncio.gather(*(worker(i) for i in range(clients)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("seconds", type=float)
    parser.add_argument("out", type=Path)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    asyncio.run(run(args.url, args.seconds, args.out, args.clients, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
