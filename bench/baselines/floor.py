"""The floor of the relay benchmark: the least Python can do to stream SSE at a pace. A
bare asyncio server (no HTTP library, no JSON at request time) that answers each chat
request with the same pre-rendered, pre-framed events a relay would write, one write
per event at the asked pace, driven by timer callbacks (no task per stream). What it
costs per event is the cost of one paced `transport.write` in Python on this machine.

    python -m bench.baselines.floor --port 8790 [--tokens-per-second 200] [--uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import ClassVar

from coderai.engine.backends.fake import fake_tokens, render_chat

HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def framed(event: bytes) -> bytes:
    """One SSE event as one HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(event), event)


def render(body: dict[str, object]) -> list[bytes]:
    """Every chunk of the answer to a chat body, framed, as CoderAI's front writes them:
    the role opening, one event per token, the finish, [DONE], and the last chunk."""
    messages = body["messages"]
    assert isinstance(messages, list)
    max_tokens = int(body.get("max_tokens") or 16)  # type: ignore[call-overload]
    tokens = fake_tokens(render_chat(messages), 0, max_tokens)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body["model"]}  # fmt: skip

    def event(delta: dict[str, str], finish: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = {**head, "choices": [choice]}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    out = [framed(event({"role": "assistant", "content": ""}, None))]
    out += [framed(event({"content": t}, None)) for t in tokens]
    out.append(framed(event({}, "length") + b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return out


class Stream(asyncio.Protocol):
    #: answers by request body: the benchmark sends one body again and again
    rendered: ClassVar[dict[bytes, list[bytes]]] = {}
    interval = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]  # uvloop's too
        self.buffer = b""
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end].decode("latin-1").lower()
        length = 0
        for line in head.split("\r\n"):
            if line.startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        if len(self.buffer) < end + 4 + length:
            return
        body = self.buffer[end + 4 : end + 4 + length]
        self.buffer = self.buffer[end + 4 + length :]
        self.close_after = "connection: close" in head
        chunks = self.rendered.get(body)
        if chunks is None:
            chunks = self.rendered[body] = render(json.loads(body))
        self.transport.write(HEAD + chunks[0])
        self.due = self.loop.time()
        self._next(chunks, 1)

    def _next(self, chunks: list[bytes], i: int) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(chunks[i])
        if i + 1 < len(chunks):
            # as the fake model's scheduler paces its tokens: on a schedule, but a late
            # token never makes up its delay
            self.due = max(self.due + self.interval, self.loop.time())
            self.loop.call_at(self.due, self._next, chunks, i + 1)
        elif self.close_after:
            self.transport.close()


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Stream, "127.0.0.1", port,
                                                            backlog=4096)  # fmt: skip
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens-per-second", type=float, default=0)
    parser.add_argument("--uvloop", action="store_true")
    args = parser.parse_args()
    Stream.interval = 1 / args.tokens_per_second if args.tokens_per_second else 0.0
    if args.uvloop:
        import uvloop

        uvloop.run(serve(args.port))
    else:
        asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
