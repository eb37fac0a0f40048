"""The coding agents on real models, before and after streams opened at admission, for
bench/REPORT.md (from bench/agents.py)."""

from __future__ import annotations

import re
from typing import Any

from bench.report.table import table

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
        "## Coding agents: streams open at admission",
        "",
        "`python -m bench.agents`. A ~2k-token prompt (1,900 words) streamed on SmolLM2 to"
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


def tasks_section(result: dict[str, Any]) -> list[str]:
    """bench/agent_tasks.py: each agent and task, done or not and seconds, on each server."""
    servers = list(dict.fromkeys(r["server"] for r in result["rows"]))
    cells = {(r["agent"], r["task"], r["server"]): r for r in result["rows"]}
    pairs = list(dict.fromkeys((r["agent"], r["task"]) for r in result["rows"]))

    def cell(row: dict[str, Any] | None) -> str:
        if row is None:
            return "not run"
        return f"{'done' if row['done'] else 'not done'}, {row['seconds']:.0f} s"

    rows = [[agent, task, *(cell(cells.get((agent, task, s))) for s in servers)]
            for agent, task in pairs]  # fmt: skip
    done = {s: sum(cells[k]["done"] for k in cells if k[2] == s) for s in servers}
    ran = {s: sum(1 for k in cells if k[2] == s) for s in servers}
    misses = [f"- {r['server']}, {r['agent']}, {r['task']}: {r['why']}"
              for r in result["rows"] if not r["done"]]  # fmt: skip
    return [
        "",
        f"## Agents on small real tasks ({result['model']}, {result['cpu']})",
        "",
        "`python -m bench.agents --model qwen-coder`: each real agent is given a task (fix a"
        " bug, create a file, change one setting) in a folder of its own; the files it leaves"
        " are judged (imported and called), never what it says. The same model file, context"
        f" ({result['context']:,} tokens) and threads on both servers, one run at a time;"
        " llama-server with `--jinja` (its tool-call parsing). One run per cell: what"
        " happened, not a rate.",
        "",
        table(["agent", "task", *servers], rows),
        "",
        "Done: " + ", ".join(f"{s} {done[s]} of {ran[s]}" for s in servers) + ".",
        "",
        "Why each miss (the judge's words):",
        "",
        *misses,
    ]
