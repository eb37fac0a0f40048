"""The bare handler: one aiohttp process that renders one OpenAI chat.completion.chunk per
token and writes it, with no dispatch at all. It is the reference for the latency a
dispatcher adds, and the engine of the HTTP-proxy baseline. With --tokens-per-second it
paces each stream as CoderAI's fake model does (one token per interval, on a schedule,
a late token never catching up), so the proxy relays one event per token, as a real model
makes it.

    python -m bench.baselines.sse_engine --port 8780 [--tokens-per-second 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

from aiohttp import web

from coderai.engine.backends.fake import fake_tokens, render_chat

INTERVAL = web.AppKey("interval", float)


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    tokens = fake_tokens(render_chat(body["messages"]), body.get("seed") or 0,
                         int(body.get("max_tokens") or 16))  # fmt: skip
    head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body["model"]}  # fmt: skip
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    interval = request.app[INTERVAL]
    due = time.monotonic()
    for i, token in enumerate(tokens):
        if interval and i:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        # paced as the fake model's scheduler paces (scheduler._step_due): on a schedule,
        # but a token made late never makes up its delay (no burst to catch up)
        due = max(due + interval, time.monotonic())
        event = {**head, "choices": [{"index": 0, "delta": {"content": token},
                                      "logprobs": None, "finish_reason": None}]}  # fmt: skip
        await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
    final = {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                  "finish_reason": "length"}]}  # fmt: skip
    await response.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
    await response.write_eof()
    return response


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens-per-second", type=float, default=0)
    args = parser.parse_args()
    app = web.Application()
    app[INTERVAL] = 1 / args.tokens_per_second if args.tokens_per_second else 0.0
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
