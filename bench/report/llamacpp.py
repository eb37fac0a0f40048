"""The llama.cpp engine's sections of bench/REPORT.md (from results/llamacpp.json and
results/batch_invariance.json)."""

from __future__ import annotations

from typing import Any

from bench.report.table import table


def llamacpp_section(result: dict[str, Any]) -> list[str]:
    rows = []
    for level, row in result["throughput"].items():
        peers = [row.get("llama_cpp_server"), row.get("llama_server")]
        rows.append([
            level,
            row["stack"]["tok_s"],
            row["ceiling"]["tok_s"],
            f"{row['stack_vs_ceiling']:.0%}",
            *(p["tok_s"] if p else "-" for p in peers),
            row["stack"]["ttft_p50_ms"],
            *(p["ttft_p50_ms"] if p else "-" for p in peers),
        ])  # fmt: skip
    cache, prefill, memory = (
        result["prefix_cache"],
        result["long_prefill"],
        result["memory_at_4_streams"],
    )
    openmp = ", ".join(f"`{k}={v}`" for k, v in result.get("openmp", {}).items()) or "unset"
    return [
        "## llama.cpp engine: SmolLM2-135M-Instruct, many sequences in one context",
        "",
        f"`python -m bench.llamacpp`: greedy, {result['tokens']} tokens per request, "
        f"`parallel: {result['parallel']}`, {result['threads']} threads on every side, "
        f"OpenMP waiting at barriers as the engine does ({openmp}); "
        f"medians of {result.get('rounds', 1)} rounds, each level run on each side in turn. The "
        "ceiling is the engine's own batched decode loop driven in the benchmark's process "
        "(no server); llama-cpp-python's server is `python -m llama_cpp.server` with the "
        "same threads and `--interrupt_requests False` (its default cancels a running "
        "request when the next arrives); llama-server is llama.cpp's own, built from the "
        "sources llama-cpp-python vendors (`bench/llamacpp_peer.py`), with one slot per "
        "sequence (`-np`), `--kv-unified`, and the engine's context, threads, batch, KV type "
        "and attention kernels.",
        "",
        table(
            [
                "streams",
                "CoderAI tok/s",
                "ceiling tok/s",
                "CoderAI / ceiling",
                "llama_cpp.server tok/s",
                "llama-server tok/s",
                "CoderAI TTFT p50 ms",
                "llama_cpp.server TTFT p50 ms",
                "llama-server TTFT p50 ms",
            ],
            rows,
        ),
        "",
        *rates_section(result),
        "Two ~1,000-token conversations taking turns, each resent with the last answer and a "
        "new question (median TTFT of the turns after each one's first):",
        "",
        table(
            ["", "TTFT ms"],
            [
                ["prefix cache on", cache["ttft_cached_ms"]],
                ["prefix cache off", cache["ttft_cold_ms"]],
                ["on / off", f"{cache['ratio']:.1%}"],
            ],
        ),
        "",
        f"A {prefill['default']['prompt_tokens']}-token prompt arriving while three streams "
        "decode (`prefill_step_ms`: how long a step that reads it may take; `n_batch` "
        "chunks of 512 tokens before it existed took 3.4 s a step here):",
        "",
        table(
            ["prefill_step_ms", "prompt read in s", "median gap ms", "largest gap while read ms"],
            [
                [step, p["prefill_s"], p["gap_median_ms"], p["gap_max_during_prefill_ms"]]
                for step, p in prefill.items()
            ],
        ),
        "",
        "Engine memory at 4 concurrent streams (peak over the run):",
        "",
        table(
            ["", "RSS MiB", "USS MiB"],
            [
                [
                    "one context, `parallel: 4`",
                    memory["parallel_4"]["rss_mib"],
                    memory["parallel_4"]["uss_mib"],
                ],
                [
                    "four instances (`parallel: 1`, `max_model_instances: 4`)",
                    memory["instances_4"]["rss_mib"],
                    memory["instances_4"]["uss_mib"],
                ],
            ],
        ),
        "",
    ]


def rates_section(result: dict[str, Any]) -> list[str]:
    rates = result.get("rates")
    if not rates:
        return []
    bench, stack, alone = rates["llama_bench"], rates["stack"], rates["ceiling"]
    rows = [
        [f"read a prompt of {n} tokens", bench[f"pp{n}"], stack[n], alone[n],
         f"{stack[n] / bench[f'pp{n}']:.0%}"]
        for n in stack
    ]  # fmt: skip
    tg = next((key for key in bench if key.startswith("tg")), None)
    one = result.get("throughput", {}).get("1")
    if tg and one:
        decode = one["stack"]["tok_s"]
        rows.append([f"decode one stream ({tg[2:]} tokens)", bench[tg], decode,
                     one["ceiling"]["tok_s"], f"{decode / bench[tg]:.0%}"])  # fmt: skip
    return [
        "Rates beside llama.cpp's `llama-bench` (built as the library was, "
        f"`{rates['llama_bench_flags']}`): a cold prompt of random token ids, alone, read "
        "through `coderai run` (prompt tokens / wall time of a one-token completion) and by "
        "the engine's instance in the benchmark's process; each side in turn, medians of "
        f"{len(rates['rounds']['stack'])} rounds. The decode row takes the engine's numbers "
        "from the table above.",
        "",
        table(
            [
                "",
                "llama-bench tok/s",
                "CoderAI tok/s",
                "engine alone tok/s",
                "CoderAI / llama-bench",
            ],
            rows,
        ),
        "",
    ]


def invariance_section(result: dict[str, Any]) -> list[str]:
    def rows(key: str) -> list[list[Any]]:
        return [
            [i, "same" if c["same"] else f"differs at token {c['first_difference']}",
             "-" if c["same"] else f"{c['gap_alone']:.3f}",
             "-" if c["same"] else f"{c['gap_other']:.3f}"]
            for i, c in enumerate(result[key])
        ]  # fmt: skip

    head = ["prompt", "greedy text", "logit gap alone", "logit gap in the other run"]
    return [
        f"## Is llama.cpp batch-invariant? ({result['model']}, KV {result['kv_cache']})",
        "",
        f"`python -m bench.batch_invariance`: {result['prompts']} chat prompts, greedy, "
        f"{result['tokens']} tokens. Each alone against all of them in one batch: "
        f"{result['batched_same']} of {result['prompts']} texts identical. Each resent after "
        f"itself (all but its last token from the prefix cache) against alone: "
        f"{result['resent_same']} of {result['prompts']} identical. Where they differ, the "
        "gap is the logit of the token one run chose minus the other's, in each run's own "
        "logits: a near-tie decided the other way.",
        "",
        "Batched against alone:",
        "",
        table(head, rows("batched")),
        "",
        "Resent (prefix cache) against alone:",
        "",
        table(head, rows("resent")),
        "",
    ]
