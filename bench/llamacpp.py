"""The llama.cpp engine on SmolLM2-135M-Instruct, in one run: batching, prefix cache,
chunked prefill, memory, and its rates beside llama.cpp's own tools.

    python -m bench.llamacpp [--tokens 128] [--levels 1,2,4,8] [--rounds 3]
        [--sections throughput,cache,prefill,memory,rates] [--prefill-step-ms MS]
        [--servers llama_cpp.server,llama-server] [--prompt-sizes 512,2048]

1. Aggregate tok/s at 1, 2, 4 and 8 concurrent streams (greedy, `--tokens` per request)
   through `coderai run`, beside the ceiling (the same batched decode loop driven in this
   process, no server), llama-cpp-python's own OpenAI server and llama.cpp's `llama-server`
   (built from the vendored sources by bench/llamacpp_peer.py: `-np` slots, one unified KV
   cache, the same threads, context and attention kernels) at the same concurrency; each
   level on each side in turn, `--rounds` times, medians. TTFT p50.
2. Two ~1,000-token conversations taking turns, each resent with a new question: TTFT
   with the prefix cache against a model entry with it off.
3. A 3,000-token prompt arriving while three streams run: their largest inter-token gap
   during its prefill against their median gap.
4. Engine RSS (and USS) at 4 streams: one context with `parallel: 4` against four
   instances (`parallel: 1`, `max_model_instances: 4`, the former way).
5. Prompt reading and decode rates beside `llama-bench` (pp at `--prompt-sizes`, tg at
   `--tokens`; the same threads, batch, KV type, attention kernels and weight repacking as
   the engine): a cold prompt of random token ids, alone, through `coderai run` (prompt
   tokens / the request's wall time, one token generated) and through the engine's
   instance driven in this process; each side in turn, `--rounds` times, medians.

The sections not run keep their results from an earlier run in `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from bench.lib.results import RESULTS, save
from bench.lib.server import BenchServer, free_port
from coderai.cli.engine import brief_openmp_spin
from tests.support.sse import DONE, event

TOPICS = ["the sea", "a mountain", "a city at night", "an old library", "a long train ride",
          "a winter forest", "a busy market", "a small robot"]  # fmt: skip
#: llama-cpp-python's server, with llama.cpp's extra buffer types on or off as our backend
#: has them by default (this machine's verdict: repack.py)
PYTHON_SERVER = """
import sys
from coderai.engine.backends.llamacpp.backend import _extra_buffer_types
from coderai.engine.backends.llamacpp.repack import KERNELS
from llama_cpp.server.__main__ import main
sys.argv = ["llama_cpp.server", *sys.argv[1:]]
with _extra_buffer_types(KERNELS.machine_on()):
    main()
"""
#: the peers the throughput section may run, by the name their results go under
#: the OpenMP settings every side ran with (the engine's, see coderai.cli.engine.brief_openmp_spin)
OPENMP_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
SERVERS = {"llama_cpp.server": "llama_cpp_server", "llama-server": "llama_server"}


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
            chunk = event(line)
            if chunk is None or chunk is DONE:
                continue
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
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
    from coderai.engine.backends.llamacpp.backend import LlamaCppBackend

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
    instance = load_instance(gguf, options["parallel"])
    n_ctx = instance.cache.ledger.cells
    peers: dict[str, Peer] = {}
    rows: dict[int, dict[str, list[dict[str, float]]]] = {n: {} for n in levels}
    try:
        for name in filter(None, args.servers.split(",")):
            peers[SERVERS[name]] = start_peer(name, gguf, threads, options, n_ctx)
        asyncio.run(concurrent(server.url, "smollm2", 1, 4))  # load it
        for peer in peers.values():
            asyncio.run(concurrent(peer.url, "smollm2", 1, 4))
        for _ in range(args.rounds):
            for n in levels:
                side = rows[n]
                side.setdefault("stack", []).append(
                    asyncio.run(concurrent(server.url, "smollm2", n, args.tokens))
                )
                side.setdefault("ceiling", []).append(ceiling(instance, n, args.tokens))
                for key, peer in peers.items():
                    side.setdefault(key, []).append(
                        asyncio.run(concurrent(peer.url, "smollm2", n, args.tokens))
                    )
    finally:
        server.stop()
        for peer in peers.values():
            peer.stop()
    out: dict[str, Any] = {}
    for n in levels:
        row: dict[str, Any] = {name: medians(values) for name, values in rows[n].items()}
        row["stack_vs_ceiling"] = row["stack"]["tok_s"] / row["ceiling"]["tok_s"]
        out[str(n)] = row
    return out


class Peer:
    """Another make of OpenAI server in its own process, as a user would start it."""

    def __init__(self, argv: list[str], port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited with {self.proc.returncode}")
            try:  # an answer once the model is loaded (llama-server says 503 until then)
                urllib.request.urlopen(self.url + "/v1/models", timeout=2).read()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"{argv[0]} did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def start_peer(name: str, gguf: str, threads: int, options: dict[str, Any], n_ctx: int) -> Peer:
    """llama-cpp-python's server (its context size, threads), or llama.cpp's llama-server
    set up as the engine's context is: one slot per sequence, one KV cache all slots
    share, the same context, threads, attention kernels and weight repacking."""
    port = free_port()
    if name == "llama_cpp.server":
        return Peer([sys.executable, "-c", PYTHON_SERVER, "--model", gguf, "--port", str(port),
                     "--n_ctx", str(n_ctx), "--n_threads", str(threads),
                     "--n_threads_batch", str(threads),
                     # its default cancels a running request when the next arrives
                     "--interrupt_requests", "False"], port)  # fmt: skip
    from bench.llamacpp_peer import ensure_built

    binary = ensure_built()["llama-server"]
    return Peer([str(binary), "-m", gguf, "--port", str(port), "-c", str(n_ctx),
                 "-np", str(options["parallel"]), "--kv-unified", "-t", str(threads),
                 "-tb", str(threads), *same_kernels(options, "llama-server"),
                 "--no-webui"], port)  # fmt: skip


def same_kernels(options: dict[str, Any], tool: str) -> list[str]:
    """llama-server's or llama-bench's flags for the engine's batch, KV type, attention
    kernels and weight repacking (the llama.cpp backend's defaults on the CPU)."""
    from coderai.catalogue.defaults import embedded_gguf
    from coderai.engine.backends.llamacpp.backend import flash_for
    from coderai.engine.backends.llamacpp.repack import KERNELS

    batch = str(options.get("n_batch") or 512)
    kv = options.get("kv_cache", "f16")
    # SmolLM2, the only model here, on the CPU, as the engine chooses its kernel there
    flash = flash_for(str(embedded_gguf()), options, int(options.get("n_ctx") or 8192))
    option = options.get("extra_buffer_types")
    repack = bool(option) if option is not None else KERNELS.machine_on()
    flags = ["-b", batch, "-ub", batch, "-ctk", kv, "-ctv", kv, "-fa", "on" if flash else "off"]
    return (
        [*flags, "--repack" if repack else "--no-repack"]
        if tool == "llama-server"
        else [*flags, "--repack", str(int(repack))]
    )


def rates(gguf: str, args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    """llama-bench's pp and tg, and the engine's rate reading a cold prompt alone through
    `coderai run` and in this process; each side in turn, `--rounds` times, medians."""
    from bench.llamacpp_peer import ensure_built

    sizes = [int(x) for x in args.prompt_sizes.split(",")]
    threads = len(os.sched_getaffinity(0))
    bench_flags = ["-t", str(threads), *same_kernels(options, "llama-bench")]
    llama_bench = ensure_built()["llama-bench"]
    entry = {"id": "smollm2", "path": gguf, "options": {**options, "prefix_cache_tokens": 0}}
    server = BenchServer({"max_parallel_requests": 16}, [entry], engines=1)
    instance = load_instance(gguf, options["parallel"])
    rng = random.Random(0)
    rows: dict[str, list[dict[str, float]]] = {"llama_bench": [], "stack": [], "ceiling": []}
    try:
        read_through_server(server.url, prompt(rng, 16))  # load it
        for _ in range(args.rounds):
            argv = [str(llama_bench), "-m", gguf, "-p", ",".join(map(str, sizes)),
                    "-n", str(args.tokens), *bench_flags, "-r", "1", "-o", "json"]  # fmt: skip
            found = json.loads(subprocess.run(argv, check=True, capture_output=True).stdout)
            rows["llama_bench"].append({
                f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}": r["avg_ts"]
                for r in found
            })  # fmt: skip
            rows["stack"].append(
                {str(n): read_through_server(server.url, prompt(rng, n)) for n in sizes}
            )
            rows["ceiling"].append({str(n): read_alone(instance, prompt(rng, n)) for n in sizes})
    finally:
        server.stop()
    out: dict[str, Any] = {name: medians(values) for name, values in rows.items()}
    out["stack_vs_llama_bench"] = {
        str(n): out["stack"][str(n)] / out["llama_bench"][f"pp{n}"] for n in sizes
    }
    out["llama_bench_flags"] = " ".join(bench_flags)
    out["rounds"] = rows
    return out


def prompt(rng: random.Random, n: int) -> list[int]:
    """n token ids of SmolLM2's ordinary vocabulary, never sent before (llama-bench reads
    random tokens too)."""
    return [rng.randrange(1_000, 48_000) for _ in range(n)]


def read_through_server(url: str, ids: list[int]) -> float:
    """Prompt tokens a second: a completion of one token, the prompt given as token ids."""
    body = {"model": "smollm2", "prompt": ids, "max_tokens": 1, "temperature": 0}
    request = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    began = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as r:
        usage = json.loads(r.read())["usage"]
    wall = time.perf_counter() - began
    assert usage["prompt_tokens"] == len(ids), usage
    return len(ids) / wall


def read_alone(instance: Any, ids: list[int]) -> float:
    """Prompt tokens a second through the engine's instance, no server: start to the first
    token sampled."""
    from coderai.bus.messages import Job
    from coderai.engine.backends.base import PENDING, READING, Sequence

    seq = Sequence(job=Job(0, {}, "completion", prompt_ids=ids, max_tokens=1, temperature=0.0))
    began = time.perf_counter()
    instance.start(seq)
    while instance.step([seq])[0] in (READING, PENDING):
        pass
    wall = time.perf_counter() - began
    instance.release(seq)
    return len(ids) / wall


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
    parser.add_argument("--sections", default="throughput,cache,prefill,memory,rates")
    parser.add_argument("--prefill-step-ms", type=float, default=None)
    parser.add_argument("--prefill-sweep", default="200,500,1000",
                        help="prefill_step_ms values the prefill section compares")  # fmt: skip
    parser.add_argument(
        "--servers",
        default=",".join(SERVERS),
        help="peers the throughput section runs beside the engine",
    )
    parser.add_argument("--prompt-sizes", default="512,2048",
                        help="prompt lengths the rates section reads")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS / "llamacpp.json")
    args = parser.parse_args()
    # this process's instance and the peers wait at OpenMP's barriers as the engine does
    brief_openmp_spin()
    from coderai.catalogue.defaults import embedded_gguf

    gguf = str(embedded_gguf())
    sections = set(args.sections.split(","))
    parallel = max(int(x) for x in args.levels.split(","))
    options: dict[str, Any] = {"parallel": parallel}
    if args.prefill_step_ms is not None:
        options["prefill_step_ms"] = args.prefill_step_ms
    result: dict[str, Any] = {"benchmark": "llamacpp", "tokens": args.tokens,
                              "parallel": parallel, "rounds": args.rounds,
                              "threads": len(os.sched_getaffinity(0)),
                              "options": options,
                              "openmp": {k: os.environ[k] for k in OPENMP_ENV
                                         if k in os.environ}}  # fmt: skip
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
    if "rates" in sections:
        result["rates"] = rates(gguf, args, options)
    # the sections not run keep what an earlier run wrote
    earlier = json.loads(args.out.read_text()) if args.out.is_file() else {}
    save({**earlier, **result}, args.out)
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
