"""An agent's turns cold and warm, and speculative decoding, for bench/REPORT.md (from
bench/agent_turns.py and bench/speculation.py)."""

from __future__ import annotations

from typing import Any

from bench.report.table import table


def turns_section(result: dict[str, Any]) -> list[str]:
    names = ", ".join(result["models"])
    flash = result.get("flash_attn", "off")
    if isinstance(flash, dict):
        flash = ", ".join(f"{flash.get(m, 'off')} for {m}" for m in result["models"])
    rounds = result.get("rounds", 1)
    out = [
        f"## An agent's turns: cold and warm, beside llama-server ({names})\n",
        "`python -m bench.agent_turns`: an agent's conversation (a system prompt with tools "
        f"of ~{result['system_tokens']:,} tokens, then per turn the answer, a tool's result "
        f"of {result.get('tool_lines', 40)} lines and a question), one agent and then "
        f"{result['agents']} agents with the same system prompt taking turns in turn, "
        f"{result['turns']} turns each, 32 greedy tokens a turn; 32k context, 4 slots, "
        f"unified KV, all threads, flash attention {flash} (the engine's default for the "
        "model on a CPU), OpenMP waiting as the engine does, on both servers. "
        + (
            f"The whole scenario {rounds} times per server, the servers taking turns, each "
            "round with a system prompt neither has seen; TTFT in seconds, the median over "
            "the rounds (each round's in brackets)"
            if rounds > 1
            else "One run per server, one after the other (from before the scenario was "
            "repeated); TTFT in seconds"
        )
        + "; warm / cold is a turn's TTFT over the first (cold) turn's.\n",
    ]
    summary = []
    for model, sides in result["models"].items():
        for side, got in sides.items():
            if "error" in got:
                summary.append([model, side, "failed: " + got["error"], "", "", ""])
                continue
            summary.append([model, side, got["cold_ttft"], got["warm_ttft_median"],
                            f"{got['warm_over_cold_median']:.1%}",
                            f"{got['warm_over_cold_max']:.1%}"])  # fmt: skip
    out += [table(["model", "server", "cold TTFT s", "warm TTFT s (median)",
                   "warm / cold (median)", "warm / cold (worst)"], summary), ""]  # fmt: skip
    for model, sides in result["models"].items():
        ours = sides.get("coderai", {}).get("rows", [])
        theirs = sides.get("llama-server", {}).get("rows", [])
        rows = []
        for i, row in enumerate(ours):
            peer = theirs[i] if i < len(theirs) else None
            rows.append([row["agents"], row["agent"], row["turn"], row["prompt_tokens"],
                         row["cached_tokens"], timing(row),
                         "—" if peer is None else timing(peer),
                         "—" if peer is None else f"{row['ttft'] / peer['ttft']:.2f}"])  # fmt: skip
        out += [f"\n{model}, each turn:\n",
                table(["agents", "agent", "turn", "prompt tokens", "cached (ours)",
                       "TTFT ours s", "TTFT llama-server s", "ours / theirs"], rows),
                ""]  # fmt: skip
    return out


def timing(row: dict[str, Any]) -> str:
    """A turn's median TTFT, with each round's."""
    each = row.get("ttfts")
    median = f"{row['ttft']:.2f}"
    return f"{median} ({', '.join(f'{t:.2f}' for t in each)})" if each else median


def speculation_section(result: dict[str, Any]) -> list[str]:
    rows = [[r["streams"], r["plain_tok_s"], r["ngram_tok_s"], f"{r['ratio']:.2f}x",
             "yes" if r["same_greedy_text"] else "no",
             f"{r['lines_copied']:.0%}" if "lines_copied" in r else "—"]
            for r in result["rows"]]  # fmt: skip
    rate = result["acceptance"]
    return [
        "## Speculative decoding by prompt lookup: a file rewritten with one change\n",
        f"`python -m bench.speculation`: {result['model']} rewrites a {result['lines']}-line "
        f"Python file with one rename (its answer's lines that are lines of the file: "
        '"copied"; the 135M model copies rather than renames), greedy, '
        f"{result['tokens']} tokens per stream, from "
        'two entries of one engine that differ only in `speculative: "ngram"`; each side '
        f"in turn, {result['rounds']} rounds, medians. Decode tok/s: completion tokens over "
        "first to last token (the prompt is read before, once per side). Draft tokens kept: "
        f"{result['draft_kept']:,.0f} of {result['draft_tokens']:,.0f}"
        + (f" ({rate:.0%})." if rate is not None else ".")
        + "\n",
        table(
            [
                "streams",
                "plain tok/s",
                "ngram tok/s",
                "ngram / plain",
                "same greedy text",
                "copied",
            ],
            rows,
        ),
        "",
    ]


def kv_types_section(result: dict[str, Any]) -> list[str]:
    rows = []
    for row in result["types"]:
        firsts = [p["first_difference"] for p in row["prompts"] if not p["same"]]
        rows.append([row["kv_cache"], f"{row['bytes_per_token']:,}", f"{row['of_f16']:.2f}",
                     f"{row['same_as_f16']} of {len(row['prompts'])}",
                     ", ".join(map(str, firsts)) or "—"])  # fmt: skip
    return [
        f"## Quantized KV caches against f16 ({result['model']})\n",
        "`python -m bench.kv_types`: bench/batch_invariance.py's 8 chat prompts alone, "
        f"greedy, {result['tokens']} tokens, flash attention on for every type (llama.cpp "
        "needs it for a quantized V cache), so only the cache type differs. KV bytes per "
        f"token: f16 {result['f16_bytes_per_token']:,}.\n",
        table(
            ["KV cache", "bytes/token", "of f16", "greedy text as f16's", "first differing token"],
            rows,
        ),
        "",
    ]
