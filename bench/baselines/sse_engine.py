"""The bare handler: one aiohttp process that renders one OpenAI chat.completion.chunk per
token and writes it, with no dispatch at all. It is the reference for the latency a
dispatcher adds, and the engine of the HTTP-proxy baseline.

    python bench/baselines/sse_engine.py --port 8780
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from coderai.engine.backends.fake import fake_tokens, render_chat


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    tokens = fake_tokens(render_chat(body["messages"]), body.get("seed") or 0,
                         int(body.get("max_tokens") or 16))  # fmt: skip
    head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body["model"]}  # fmt: skip
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for token in tokens:
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
    args = parser.parse_args()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
