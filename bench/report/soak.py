"""The chaos soak for bench/REPORT.md (from bench/soak.py): requests by outcome, chaos,
latency, the invariants, and the front's RSS over the run as a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from bench.report.plot import save
from bench.report.table import table

OUTCOMES = ("completed", "cancelled", "error", "refused")


def soak_section(result: dict[str, Any], plots: Path) -> list[str]:
    kinds = result["by_kind"]
    others = sorted({o for k in kinds.values() for o in k} - set(OUTCOMES))
    columns = [*OUTCOMES, *others]
    rows = [[kind, *(counts.get(o, 0) for o in columns), sum(counts.values())]
            for kind, counts in kinds.items()]  # fmt: skip
    rows.append(["all", *(result["outcomes"].get(o, 0) for o in columns), result["requests"]])
    latency = [[kind, v["p50_ms"], v["p99_ms"]] for kind, v in result["latency"].items()]
    chaos = ", ".join(f"{n} {action}" for action, n in sorted(result["chaos"].items()))
    rss = result["rss_mb"]
    log = result["log"]
    checks = [[name, "yes" if ok else "**no**"] for name, ok in result["invariants"].items()]
    errors = "; ".join(f"{why.strip()} ({n})" for why, n in result["errors"].items())
    return [
        "## Chaos soak: nothing lost",
        "",
        f"`python -m bench.soak --minutes {result['minutes']:g}`: {result['engines']} engines"
        f" serving fake models, {result['clients']} clients in another process"
        " (bench/soak_load.py) sending streamed and whole chat and completions, embeddings,"
        " tool calls, streams left after two events, slow readers and bad bodies, every answer"
        " checked against the fake model's deterministic output. Meanwhile a chaos thread, every"
        f" 2-6 s: {chaos} ({result['chaos_skipped']} skipped: no engine had outlived its"
        " start-up). `kill` is SIGKILL; `stop` is SIGSTOP for about 0.5 s or 1.5x the"
        " heartbeat silence after which the front gives an engine up; `restart` goes through"
        " the admin API; `catalogue` replaces the catalogue through it, adding or removing a"
        f" model. Engines restarted: {result['restarts']}.",
        "",
        table(["kind", *columns, "all"], rows),
        "",
        "completed: the whole answer, exactly the model's; cancelled: the client left on"
        " purpose (or read a short answer whole first); error: an explicit error, 503 or 429"
        " with its OpenAI envelope or an error event in the stream; refused: a bad body"
        " answered 400 (404 for an unknown model). Any other outcome (hung, truncated, wrong,"
        " bad_error, bad_response) is a defect." + (f" The errors: {errors}." if errors else ""),
        "",
        table(["kind (completed)", "p50 ms", "p99 ms"], latency),
        "",
        "Latency includes the model's own pace (200 tokens/s, 4-48 tokens; the wide model"
        " 256-character tokens read slowly) and every wait the chaos caused.",
        "",
        table(["invariant, after the run", "held"], checks),
        "",
        f"Front RSS {rss['start']:.0f} MiB at the start, {rss['end']:.0f} MiB at the end;"
        f" {log['lines']} log lines in {result['seconds']:.0f} s (WARNING and above), at most"
        f" {log['busiest_second']} in one second.",
        "",
        f"![soak-rss.png](plots/{plot_rss(rss['samples'], result['chaos_log'], plots)})",
        "",
    ]


def plot_rss(samples: list[list[float]], chaos: list[dict[str, Any]], plots: Path) -> str:
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    ax.plot([s[0] / 60 for s in samples], [s[1] for s in samples], label="front RSS")
    for action in chaos:  # seconds since the load began, as the samples
        if action["action"] in ("kill", "stop") and "engine" in action:
            ax.axvline(action["at"] / 60, color="red", alpha=0.15, linewidth=0.8)
    ax.set_xlabel("minutes (red: an engine killed or stopped)")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    return save(fig, plots, "soak-rss.png", 110)
