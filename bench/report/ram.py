"""The fleet's host-RAM cap, step by step, for bench/REPORT.md (from bench/ram_cap.py)."""

from __future__ import annotations

from typing import Any

from bench.report.table import table


def ram_cap_section(result: dict[str, Any]) -> list[str]:
    rows = []
    for step in result["steps"]:
        loaded = " / ".join(", ".join(m) or "-" for m in step["loaded"].values())
        rss = step["rss_mb"]
        waited = step["waited_s"]
        rows.append([
            step["step"], loaded, *(round(rss[p]) for p in ("front", "a", "b", "c")),
            round(step["total_mb"]), round(step["peak_mb"]), round(step["cap_mb"]),
            "" if waited is None else f"{waited:.2f} s",
        ])  # fmt: skip
    stream = result["stream"]
    head = ["step", "loaded (a / b / c)", "front", "a", "b", "c", "fleet", "peak", "cap",
            "waited"]  # fmt: skip
    return [
        "## The fleet's host-RAM cap",
        "",
        table(head, rows),
        "",
        f"MiB. Three engines under one `offload.max_ram_gb`, set to the idle fleet's RSS plus"
        f" two and a half fake models of {result['model_mb']} MiB each (each allocates and"
        " touches its memory). The fleet's peak was sampled every 20 ms while each step ran;"
        " it never crossed the cap. A load that needed room waited for the front to unload"
        " the least recently used idle model on another engine; the stream on b, generating"
        f" throughout, was never unloaded and ended with {stream['events']} events and"
        f" finish_reason `{stream['finish_reason']}`. Not shown: real models (torch and"
        " llama.cpp give memory back less promptly than a bytearray) and several loads"
        " waiting at once.",
        "",
    ]
