"""The llama.cpp engine on SmolLM2-135M-Instruct, in one run: batching, prefix cache,
chunked prefill and memory.

    python bench/llamacpp.py [--tokens 128] [--levels 1,2,4,8] [--rounds 3]
        [--sections throughput,cache,prefill,memory] [--prefill-step-ms MS]
        [--skip-llama-server]

1. Aggregate tok/s at 1, 2, 4 and 8 concurrent streams (greedy, `--tokens` per request)
   through `coderai run`, beside the ceiling (the same batched decode loop driven in this
   process, no server) and beside llama-cpp-python's own OpenAI server at the same
   concurrency; each level on each side in turn, `--rounds` times, medians. TTFT p50.
2. Two ~1,000-token conversations taking turns, each resent with a new question: TTFT
   with the prefix cache against a model entry with it off.
3. A 3,000-token prompt arriving while three streams run: their largest inter-token gap
   during its prefill against their median gap.
4. Engine RSS (and USS) at 4 streams: one context with `parallel: 4` against four
   instances (`parallel: 1`, `max_model_instances: 4`, the former way).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import RESULTS, save
from bench.server import BenchServer, free_port

TOPICS = ["the sea", "a mountain", "a city at night", "an old library", "a long train ride",
          "a winter forest", "a busy market", "a small robot"]  # fmt: skip
#: llama-cpp-python's server, with the extra buffer types that crash SmolLM2 here turned
#: off exactly as our backend does (see llamacpp_backend._extra_buffer_types)
LLAMA_SERVER = """
import sys
from llama_cpp import llama_cpp as binding
original = binding.llama_model_default_params
def params():
    p = original()
    p.use_extra_bufts = False
    return p
binding.llama_model_default_params = params
from llama_cpp.server.__main__ import main
sys.argv = ["llama_cpp.server", *sys.argv[1:]]
main()
"""


def story(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a long, detailed story about {TOPICS[i % 8]}."}]


async def stream(
    session: aiohttp.ClientSession, url: str, model: str, messages: list[Any], tokens: int
) -> dict[str, Any]:
    """One streamed chat request: its start, the arrival time of each content event, its
    completion tokens (from usage, or the events when a server sends none)."""
    body = {"model": model, "messages": messages, "stream": True, "temperature": 0,
            "max_tokens": tokens, "stream_options": {"include_usage": True}}  # fmt: skip
    start = time.perf_counter()
    arrivals: list[float] = []
    text, usage = "", None
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                piece = choice.get("delta", {}).get("content")
                if piece:
                    arrivals.append(time.perf_counter())
                    text += piece
    tokens_out = usage["completion_tokens"] if usage else len(arrivals)
    return {"start": start, "arrivals": arrivals, "end": time.perf_counter(),
            "tokens": tokens_out, "text": text, "usage": usage}  # fmt: skip


async def concurrent(url: str, model: str, n: int, tokens: int) -> dict[str, float]:
    async with aiohttp.ClientSession() as session:
        t0 = time.perf_counter()
        rows = await asyncio.gather(
            *(stream(session, url, model, story(i), tokens) for i in range(n))
        )
        wall = time.perf_counter() - t0
    ttfts = [(r["arrivals"][0] - r["start"]) * 1e3 for r in rows if r["arrivals"]]
    total = sum(r["tokens"] for r in rows)
    return {"tok_s": total / wall, "tokens": total, "ttft_p50_ms": statistics.median(ttfts)}


def load_instance(gguf: str, parallel: int) -> Any:
    """The engine's llama.cpp instance in this process, as an engine would load it."""
    from coderai.bus.messages import ModelSpec
    from coderai.engine.backends.base import LoadProgress
    from coderai.engine.backends.llamacpp_backend import LlamaCppBackend

    options = {"parallel": parallel, "prefix_cache_tokens": 0}
    return LlamaCppBackend().load(ModelSpec("smollm2", gguf, "gguf", options), LoadProgress())


def ceiling(instance: Any, n: int, tokens: int) -> dict[str, float]:
    """The engine's batched decode loop with no server: n chat sequences at once."""
    from coderai.bus.messages import Job
    from coderai.engine.backends.base import END, PENDING, READING, Sequence

    seqs = []
    t0 = time.perf_counter()
    for i in range(n):
        seq = Sequence(job=Job(i, {}, "chat", messages=story(i), max_tokens=tokens,
                               temperature=0.0))  # fmt: skip
        instance.start(seq)
        seqs.append(seq)
    live, first = list(seqs), dict[int, float]()
    while live:
        for seq, result in zip(list(live), instance.step(live), strict=True):
            if result is PENDING or result is READING:
                continue
            if result is not END:
                first.setdefault(seq.job.job_id, time.perf_counter())
                seq.completion_tokens += 1
            if result is END or seq.completion_tokens >= tokens:
                live.remove(seq)
                instance.release(seq)
    wall = time.perf_counter() - t0
    total = sum(s.completion_tokens for s in seqs)
    ttfts = [(t - t0) * 1e3 for t in first.values()]
    return {"tok_s": total / wall, "tokens": total, "ttft_p50_ms": statistics.median(ttfts)}


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


def throughput(gguf: str, args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    """Each level on each side in turn, `--rounds` times: medians, measured side by side."""
    levels = [int(x) for x in args.levels.split(",")]
    threads = len(os.sched_getaffinity(0))
    entry = {"id": "smollm2", "path": gguf, "options": {**options, "prefix_cache_tokens": 0}}
    server = BenchServer({"max_parallel_requests": 16}, [entry], engines=1)
    other = None if args.skip_llama_server else LlamaServer(gguf, threads)
    instance = load_instance(gguf, options["parallel"])
    rows: dict[int, dict[str, list[dict[str, float]]]] = {n: {} for n in levels}
    try:
        asyncio.run(concurrent(server.url, "smollm2", 1, 4))  # load it
        if other is not None:
            asyncio.run(concurrent(other.url, "smollm2", 1, 4))
        for _ in range(args.rounds):
            for n in levels:
                side = rows[n]
                side.setdefault("stack", []).append(
                    asyncio.run(concurrent(server.url, "smollm2", n, args.tokens))
                )
                side.setdefault("ceiling", []).append(ceiling(instance, n, args.tokens))
                if other is not None:
                    side.setdefault("llama_cpp_server", []).append(
                        asyncio.run(concurrent(other.url, "smollm2", n, args.tokens))
                    )
    finally:
        server.stop()
        if other is not None:
            other.stop()
    out: dict[str, Any] = {}
    for n in levels:
        row: dict[str, Any] = {name: medians(values) for name, values in rows[n].items()}
        row["stack_vs_ceiling"] = row["stack"]["tok_s"] / row["ceiling"]["tok_s"]
        out[str(n)] = row
    return out


class LlamaServer:
    """llama-cpp-python's OpenAI server (its own process), as a user would start it."""

    def __init__(self, gguf: str, threads: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = ["--model", gguf, "--port", str(self.port), "--n_ctx", "8192",
                "--n_threads", str(threads), "--n_threads_batch", str(threads),
                # its default cancels a running request when the next arrives: queue them
                "--interrupt_requests", "False"]  # fmt: skip
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LLAMA_SERVER, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with psutil.Process(self.proc.pid).oneshot():
                    pass
                import urllib.request

                urllib.request.urlopen(self.url + "/v1/models", timeout=2).read()
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError("llama_cpp.server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def conversation(seed: str) -> list[dict[str, str]]:
    """About 1,000 tokens of context: a long pasted text and a first question."""
    paragraph = (
        f"Section about {seed}: the service keeps a queue of requests, each with a "
        "deadline, a priority and an owner; workers take them in order and report "
        "progress while a supervisor restarts any worker that stops answering. "
    )
    return [{"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": paragraph * 22 + "\nSummarise the design."}]  # fmt: skip


async def turns(url: str, model: str, rounds: int) -> list[float]:
    """Two conversations taking turns; each turn resends its conversation with the last
    answer and a new question. The TTFT of every turn after each one's first."""
    talks = {name: conversation(name) for name in ("billing", "search")}
    ttfts: list[float] = []
    async with aiohttp.ClientSession() as session:
        for turn in range(rounds):
            for messages in talks.values():
                r = await stream(session, url, model, messages, 24)
                if turn:
                    ttfts.append((r["arrivals"][0] - r["start"]) * 1e3)
                question = f"And what about point {turn + 2}?"
                messages += [{"role": "assistant", "content": r["text"]},
                             {"role": "user", "content": question}]  # fmt: skip
    return ttfts


async def long_prefill(url: str, model: str) -> dict[str, float]:
    """Three streams run; a ~3,000-token prompt arrives once each has its first token."""
    long_text = "The quick brown fox jumps over the lazy dog, again and again. " * 230
    async with aiohttp.ClientSession() as session:
        runners = [asyncio.create_task(stream(session, url, model, story(i), 300))
                   for i in range(3)]  # fmt: skip
        await asyncio.sleep(0)
        while True:  # wait until all three are decoding (events, polled from the client)
            await asyncio.sleep(0.05)
            health = await (await session.get(url + "/healthz")).json()
            counters = health["engines"][0].get("models", {}).get(model, {})
            if counters.get("running", 0) == 3 and counters.get("kv_used", 0) > 0:
                break
        sent = time.perf_counter()
        big = await stream(session, url, model, [{"role": "user", "content": long_text}], 1)
        prefill_done = big["arrivals"][0] if big["arrivals"] else big["end"]
        rows = await asyncio.gather(*runners)
    during, everything = [], []
    for r in rows:
        a = r["arrivals"]
        gaps = [(b - x, b) for x, b in itertools.pairwise(a)]
        everything += [g for g, _ in gaps]
        during += [g for g, at in gaps if sent <= at <= prefill_done + 0.5]
    return {
        "prompt_tokens": big["usage"]["prompt_tokens"] if big["usage"] else -1,
        "prefill_s": prefill_done - sent,
        "gap_median_ms": statistics.median(everything) * 1e3,
        "gap_max_during_prefill_ms": max(during) * 1e3 if during else float("nan"),
    }


async def rss_at_four(url: str, model: str, engine: psutil.Process) -> dict[str, float]:
    peak_rss = peak_uss = 0
    async with aiohttp.ClientSession() as session:
        task = asyncio.gather(*(stream(session, url, model, story(i), 96) for i in range(4)))
        while not task.done():
            info = engine.memory_full_info()
            peak_rss, peak_uss = max(peak_rss, info.rss), max(peak_uss, info.uss)
            await asyncio.sleep(0.1)
        await task
    return {"rss_mib": peak_rss / 2**20, "uss_mib": peak_uss / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--levels", default="1,2,4,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--sections", default="throughput,cache,prefill,memory")
    parser.add_argument("--prefill-step-ms", type=float, default=None)
    parser.add_argument("--prefill-sweep", default="200,500,1000",
                        help="prefill_step_ms values the prefill section compares")  # fmt: skip
    parser.add_argument("--skip-llama-server", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "llamacpp.json")
    args = parser.parse_args()
    from coderai.defaults import embedded_gguf

    gguf = str(embedded_gguf())
    sections = set(args.sections.split(","))
    parallel = max(int(x) for x in args.levels.split(","))
    options: dict[str, Any] = {"parallel": parallel}
    if args.prefill_step_ms is not None:
        options["prefill_step_ms"] = args.prefill_step_ms
    result: dict[str, Any] = {"benchmark": "llamacpp", "tokens": args.tokens,
                              "parallel": parallel, "rounds": args.rounds,
                              "threads": len(os.sched_getaffinity(0)),
                              "options": options}  # fmt: skip
    if "throughput" in sections:
        result["throughput"] = throughput(gguf, args, options)
    if sections & {"cache", "prefill"}:
        sweep = [float(x) for x in args.prefill_sweep.split(",")] if "prefill" in sections else []
        no_cache = {**options, "prefix_cache_tokens": 0}
        models = [{"id": "smollm2", "path": gguf, "options": options},
                  {"id": "smollm2-cold", "path": gguf, "options": no_cache},
                  *({"id": f"smollm2-step-{ms:g}", "path": gguf,
                     "options": {**no_cache, "prefill_step_ms": ms}} for ms in sweep)]  # fmt: skip
        server = BenchServer({"max_parallel_requests": 16}, models, engines=1)
        try:
            asyncio.run(concurrent(server.url, "smollm2", 1, 4))  # load both
            asyncio.run(concurrent(server.url, "smollm2-cold", 1, 4))
            if "cache" in sections:
                cached = asyncio.run(turns(server.url, "smollm2", args.turns))
                cold = asyncio.run(turns(server.url, "smollm2-cold", args.turns))
                result["prefix_cache"] = {
                    "ttft_cached_ms": statistics.median(cached),
                    "ttft_cold_ms": statistics.median(cold),
                    "ratio": statistics.median(cached) / statistics.median(cold),
                    "turns": {"cached": cached, "cold": cold},
                }
            if "prefill" in sections:  # the default, then each step length of the sweep
                result["long_prefill"] = {
                    "default": asyncio.run(long_prefill(server.url, "smollm2-cold")),
                    **{f"{ms:g}": asyncio.run(long_prefill(server.url, f"smollm2-step-{ms:g}"))
                       for ms in sweep},
                }  # fmt: skip
        finally:
            server.stop()
    if "memory" in sections:
        result["memory_at_4_streams"] = memory(gguf)
    save(result, args.out)
    return 0


def memory(gguf: str) -> dict[str, Any]:
    out = {}
    for label, options, instances in (("parallel_4", {"parallel": 4}, 1),
                                      ("instances_4", {"parallel": 1}, 4)):  # fmt: skip
        srv = BenchServer({"max_parallel_requests": 8},
                          [{"id": "smollm2", "path": gguf, "options": options}], engines=1,
                          extra={"models": {"max_model_instances": instances}})  # fmt: skip
        try:
            (engine,) = srv.engine_processes()
            out[label] = asyncio.run(rss_at_four(srv.url, "smollm2", engine))
        finally:
            srv.stop()
    return out


if __name__ == "__main__":
    raise SystemExit(main())
