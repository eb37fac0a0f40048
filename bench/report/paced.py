"""The equal-events relay section of bench/REPORT.md, from results/relay-paced.json
(bench/relay.py with every design paced alike)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report.table import table

HEAD = ["rate", "design", "streams", "events/s", "front µs/event", "all µs/event",
        "TTFT p50 / p99 ms", "ITL p50 / p99 ms", "content events/answer (timed)"]  # fmt: skip
RATIOS = ["rate", "streams", "front µs/event: coderai / proxy", "coderai / floor",
          "events/s: coderai / proxy"]  # fmt: skip


def paced_relay_section(result: dict[str, Any]) -> list[str]:
    rows = result["rows"]
    body = [
        [f"{r['rate']:g}", r["design"], r["concurrency"], r["events_per_s"],
         r["front_cpu_us_per_event"], r["total_cpu_us_per_event"],
         f"{r['ttft_p50_ms']:.1f} / {r['ttft_p99_ms']:.1f}",
         f"{r['itl_p50_ms']:.2f} / {r['itl_p99_ms']:.2f}", r["chunks_per_request"]]
        for r in rows
    ]  # fmt: skip
    by = {(r["rate"], r["concurrency"], r["design"]): r for r in rows}
    ratios = []
    for (rate, level, design), ours in by.items():
        proxy, floor = by.get((rate, level, "proxy")), by.get((rate, level, "floor"))
        if design != "coderai" or proxy is None or floor is None:
            continue
        cpu = "front_cpu_us_per_event"
        ratios.append([f"{rate:g}", level, ours[cpu] / proxy[cpu], ours[cpu] / floor[cpu],
                       ours["events_per_s"] / proxy["events_per_s"]])  # fmt: skip
    single = [[name, t["ttft_p50_ms"], t["ttft_p99_ms"]]
              for name, t in result["single_stream_ttft"].items()]  # fmt: skip
    return [
        "## Relay at one event per token: every design paced alike",
        "",
        "`python -m bench.relay` (defaults): each design's engines pace every stream at the"
        " rate (tokens/s), so each token is its own SSE event in every design; two engines,"
        " 256 tokens per answer. wrk holds most streams while an asyncio client times"
        " min(32, streams/8) of them at the same time; events are counted from wrk's bytes"
        " read (partial answers count) and the client's own count; front µs/event is the"
        " relaying process's CPU (rusage) per event. `floor` is a bare asyncio server"
        " writing pre-rendered events at the pace (`bench/baselines/floor.py`).",
        "",
        table(HEAD, body),
        "",
        table(RATIOS, ratios),
        "",
        table(["design", "one stream, one token: TTFT p50 ms", "p99 ms"], single),
        "",
        "Where the offered load (streams times rate) is more than a design can serve on this"
        " 2-core machine (which also runs wrk, the timing client and every engine), events"
        " fall behind their pace and the figures are that design's limit, not its cost at"
        " the pace. A proxy that falls behind reads several events per socket read and"
        " forwards them in one write (ITL p50 near 0 ms), so its µs per event drops under"
        " overload; CoderAI holds each stream's events apart until its engines fall behind."
        " Where a design merges a stream's tokens into fewer SSE events (its timed answers"
        " carry fewer than 256 content events in the last column: CoderAI at 1,000 tok/s"
        " (233 down to 119), at 200 tok/s x 1,024 (231) and slightly at 50 x 1,024), the"
        " work is no longer alike: events/s counts wrk's"
        " bytes as whole unmerged answers' worth of events, so a merged answer counts for"
        " fewer events than it carried tokens, and µs/event there is CPU per unmerged-event"
        " equivalent, not per event written. The proxy's merging is at the socket (several"
        " events per write, each still its own event), so its column stays at 256.",
        "",
    ]


def _ratios(
    result: dict[str, Any], key: str, other: str, levels: tuple[int, ...]
) -> list[tuple[float, float, int]]:
    """(ratio coderai/other of `key`, rate, streams) for every rate at the levels named."""
    by = {(r["rate"], r["concurrency"], r["design"]): r for r in result["rows"]}
    out = []
    for (rate, level, design), ours in by.items():
        theirs = by.get((rate, level, other))
        if design == "coderai" and level in levels and theirs is not None:
            out.append((ours[key] / theirs[key], rate, level))
    return out


def _span(ratios: list[tuple[float, float, int]], worst: Any) -> str:
    low, high = min(r for r, _, _ in ratios), max(r for r, _, _ in ratios)
    ratio, rate, level = worst(ratios, key=lambda t: t[0])
    return f"{low:.2f}-{high:.2f}x (worst {ratio:.2f}x: {rate:g} tok/s, {level} streams)"


def paced_targets(result: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Issue 16's targets, each with its worst case over the run's rates and levels."""
    cpu = "front_cpu_us_per_event"
    levels = tuple(sorted({r["concurrency"] for r in result["rows"]}))
    big = tuple(n for n in levels if n >= 256)
    rows = []
    if proxy := _ratios(result, cpu, "proxy", big):
        rows.append((f"front µs/event ≤ 0.5x the proxy's at {', '.join(map(str, big))} streams",
                     _span(proxy, max), max(r for r, _, _ in proxy) <= 0.5))  # fmt: skip
    if floor := _ratios(result, cpu, "floor", big):
        rows.append((f"front µs/event ≤ 1.5x the floor's at {', '.join(map(str, big))} streams",
                     _span(floor, max), max(r for r, _, _ in floor) <= 1.5))  # fmt: skip
    if rate := _ratios(result, "events_per_s", "proxy", levels):
        rows.append(("events/s ≥ the proxy's at every level", _span(rate, min),
                     min(r for r, _, _ in rate) >= 1.0))  # fmt: skip
    at = {(r["rate"], r["concurrency"], r["design"]): r for r in result["rows"]}
    if (itl := at.get((200.0, 256, "coderai"))) is not None:
        measured = f"{itl['itl_p99_ms']:.1f} ms"
        if (floor_row := at.get((200.0, 256, "floor"))) is not None:
            measured += f" (floor {floor_row['itl_p99_ms']:.1f})"
        rows.append(("ITL p99 at 256 streams x 200 tok/s ≤ 2x the 5 ms pace", measured,
                     itl["itl_p99_ms"] <= 2 * 1000 / 200))  # fmt: skip
    single = result.get("single_stream_ttft", {})
    if {"coderai", "proxy"} <= set(single):
        ours, theirs = single["coderai"]["ttft_p50_ms"], single["proxy"]["ttft_p50_ms"]
        rows.append(("TTFT at one stream (p50) ≤ the proxy's", f"{ours:.2f} vs {theirs:.2f} ms",
                     ours <= theirs))  # fmt: skip
    return rows


def plot_paced(result: dict[str, Any], plots: Path) -> list[str]:
    """Front µs/event and events/s against streams, one line per design, one figure per
    measure with a panel per rate."""
    import matplotlib.pyplot as plt

    from bench.report.plot import save, streams_panel

    rates = sorted({r["rate"] for r in result["rows"]})
    designs = list(dict.fromkeys(r["design"] for r in result["rows"]))
    names = []
    for key, label, name in [
        ("front_cpu_us_per_event", "front CPU µs per event", "relay-paced-cpu.png"),
        ("events_per_s", "events/s delivered", "relay-paced-events.png"),
    ]:
        fig, axes = plt.subplots(1, len(rates), figsize=(4 * len(rates), 3.4), squeeze=False)
        for ax, rate in zip(axes[0], rates, strict=True):
            lines = {d: [r for r in result["rows"] if r["rate"] == rate and r["design"] == d]
                     for d in designs}  # fmt: skip
            streams_panel(ax, lines, key, "streams")
            ax.set_title(f"{rate:g} tok/s per stream")
        axes[0][0].set_ylabel(label)
        axes[0][0].legend()
        names.append(save(fig, plots, name, 100))
    return names
