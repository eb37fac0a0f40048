"""The equal-events relay section of bench/REPORT.md, from results/relay-paced.json
(bench/relay.py with every design paced alike)."""

from __future__ import annotations

from typing import Any

from bench.report_table import table

HEAD = ["rate", "design", "streams", "events/s", "front µs/event", "all µs/event",
        "TTFT p50 / p99 ms", "ITL p50 / p99 ms"]  # fmt: skip
RATIOS = ["rate", "streams", "front µs/event: coderai / proxy", "coderai / floor",
          "events/s: coderai / proxy"]  # fmt: skip


def paced_relay_section(result: dict[str, Any]) -> list[str]:
    rows = result["rows"]
    body = [
        [f"{r['rate']:g}", r["design"], r["concurrency"], r["events_per_s"],
         r["front_cpu_us_per_event"], r["total_cpu_us_per_event"],
         f"{r['ttft_p50_ms']:.1f} / {r['ttft_p99_ms']:.1f}",
         f"{r['itl_p50_ms']:.2f} / {r['itl_p99_ms']:.2f}"]
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
        "`python bench/relay.py` (defaults): each design's engines pace every stream at the"
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
        " overload; CoderAI holds each stream's events apart until its engines fall behind.",
        "",
    ]
