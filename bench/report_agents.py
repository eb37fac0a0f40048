"""The coding agents on real models, before and after issue 28, for bench/REPORT.md (from
bench/agents.py)."""

from __future__ import annotations

import re
from typing import Any

from bench.report_table import table

MILESTONES = [
    ("status", "status line"),
    ("message_start", "message_start"),
    ("first_keepalive", "first keep-alive"),
    ("first_output", "first text"),
]


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _verdict(row: dict[str, Any]) -> str:
    if row["exit"] == -9:
        return "stopped 60 s into its answer (the base model did not end its turn)"
    if row["exit"] == 0:
        said = [x for x in row["output"].strip().splitlines() if not x.startswith("Tokens:")]
        return "answered: " + (said[-1][:60] if said else "(empty)")
    # why it gave up, in its own words: Claude Code's result, Codex's ERROR line
    found = re.search(r'"result":"([^"]*)"', row["output"]) or re.search(
        r"ERROR: (.*)", row["errors"]
    )
    return f"exit {row['exit']}: " + (found[1][:90] if found else "?")


def agents_section(result: dict[str, Any]) -> list[str]:
    before, after = result["opening"]["before"], result["opening"]["after"]
    runs = len(after["runs"])
    rows = [[label, _seconds(before["median_s"].get(key)), _seconds(after["median_s"].get(key))]
            for key, label in MILESTONES]  # fmt: skip
    out = [
        "## Coding agents: streams open at admission (issue 28)",
        "",
        "`python bench/agents.py`. A ~2k-token prompt (1,900 words) streamed on SmolLM2 to"
        " `/v1/messages` by a Python client, seconds after the request was sent, medians of"
        f" {runs} runs, each with a prompt of its own; the code before the change"
        f" ({result['before']}) and this code, side by side in one run, same model, same"
        " machine. Before, nothing, not even the status line, came until the first token.",
        "",
        table(["milestone", f"before ({result['before']})", "after"], rows),
        "",
        "What it does not show: a faster machine reads the prompt sooner, and both columns"
        " shrink; the keep-alive interval was 2 s here (10 s by default).",
        "",
    ]
    agents = result.get("agents")
    if agents:
        rows = [[r["agent"], r["model"], when, _seconds(r.get("first_answer_s")),
                 f"{r['seconds']:.1f}", _verdict(r)]
                for when in ("before", "after") for r in agents[when]]  # fmt: skip
        out += [
            "### Each agent, one plain question",
            "",
            "Stock agents (tests/support/agents.py): Claude Code and Codex ask Gemma 3 270M"
            " (32k context, a Gemma chat template from the catalogue: their own prompts are"
            " over SmolLM2's 8k), opencode and aider ask SmolLM2. First answer: Claude Code's"
            " first text delta in its own stream-json output; Codex's first token as the"
            " server's time-to-first-token metric counts it (it prints whole messages);"
            " opencode and aider print at the end. A base model may not end its turn: a run"
            " is stopped 60 s after its answer began (exit -9). Before the change Claude Code"
            " and Codex were refused on their first request; opencode and aider worked before.",
            "",
            table(["agent", "model", "code", "first answer s", "run s", "outcome"], rows),
            "",
        ]
    return out
