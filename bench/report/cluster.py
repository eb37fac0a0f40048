"""The cluster section of bench/REPORT.md, from results/cluster.json (bench/cluster.py)."""

from __future__ import annotations

from typing import Any

from bench.report.table import table


def cluster_section(result: dict[str, Any]) -> list[str]:
    args = result["args"]
    paths = table(
        ["path", "streams", "TTFT ms (median)", "tok/s (median)"],
        [[r["transport"], r["streams"], r["ttft_ms"], r["tok_s"]] for r in result["streams"]],
    )
    echo = table(
        ["bare socket pair", "µs per 200-byte round trip (median)"],
        [[c["transport"], c["us_per_round_trip"]] for c in result["echo"]],
    )
    return [
        "## Beyond one machine: a remote engine and a node over CURVE (loopback)",
        "",
        f"`python -m bench.cluster --rounds {args['rounds']}`: one head with a local engine"
        " (ipc), a remote engine (`coderai engine --connect tcp://127.0.0.1:…`, CURVE) and a"
        " node (a whole `coderai run` with one engine and `cluster.head` set), the same fake"
        f" model pinned to each and paced at {args['tokens_per_second']:g} tokens/s per"
        f" stream, {args['tokens']} tokens per request; rounds alternate the three paths,"
        " medians over rounds.",
        "",
        paths,
        "",
        echo,
        "",
        "A remote engine over loopback CURVE costs nothing measurable against ipc at this"
        " pace; a node adds its own front (dispatcher, relay task, a second bus hop) to the"
        " first token, and no throughput. What these do not show: a real network's latency"
        " and loss (loopback only), CURVE's handshake (once per connection), and full-speed"
        " streams, where the node's extra hop would cost more CPU.",
        "",
    ]
