"""What a JSON-schema constraint costs a decoding model: one sequence decoded greedily with
and without llguidance's mask, on both backends, in alternating rounds (A B A B ...), in
one run. The engine's own instances are driven in this process, so the figures are the
model's step plus the constraint's work (mask, apply, advance), nothing of HTTP.

    python bench/constrained.py [--model PATH] [--tokens 96] [--rounds 5]

Like with like: both sides decode the same prompt for `tokens` steps; the constrained side
writes a JSON array of at least 64 short strings (it cannot end before `tokens`), the free
side writes whatever it likes, and a side that ends early is measured over the tokens it
wrote (the token counts are in the result). Prompt reading is excluded: the clock starts
at the first token. What this does not show: a schema with large alternations (anyOf over
many tools) costs more per mask; the first use of a model builds llguidance's view of its
vocabulary (timed separately).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import RESULTS, save

PROMPT = "List the names of many fruits, as many as you know."
#: long enough that every run writes `tokens` tokens under it (a free array may be "[]")
SCHEMA = {
    "type": "array",
    "items": {"type": "string", "minLength": 3, "maxLength": 24},
    "minItems": 64,
}


def _load(backend: str, path: str) -> Any:
    from coderai.bus.messages import ModelSpec
    from coderai.engine.backends.base import LoadProgress

    if backend == "llama.cpp":
        from coderai.engine.backends.llamacpp.backend import LlamaCppBackend

        return LlamaCppBackend().load(ModelSpec("m", path, "gguf"), LoadProgress())
    from coderai.engine.backends.transformers.backend import TransformersBackend

    spec = ModelSpec("m", path, "gguf", {"backend": "transformers"})
    return TransformersBackend().load(spec, LoadProgress())


def decode(instance: Any, constrained: bool, tokens: int) -> dict[str, float]:
    """One greedy sequence: seconds per token after the first, and how many it wrote."""
    from coderai.bus.messages import Job
    from coderai.engine.backends import structured
    from coderai.engine.backends.base import END, PENDING, READING, Sequence

    fmt = {"type": "json_schema", "schema": SCHEMA} if constrained else {}
    job = Job(1, {}, "chat", messages=[{"role": "user", "content": PROMPT}],
              temperature=0, max_tokens=tokens, response_format=fmt)  # fmt: skip
    seq = Sequence(job=job)
    instance.start(seq)
    seq.instance = instance
    structured.prepare(seq, instance)
    first = None
    written = 0
    while written < tokens:
        result = instance.step([seq])[0]
        if result is END:
            break
        if result is READING or result is PENDING:
            continue
        written += 1
        if first is None:
            first = time.perf_counter()
    elapsed = time.perf_counter() - (first or time.perf_counter())
    instance.release(seq)
    return {"per_token_ms": 1000 * elapsed / max(1, written - 1), "tokens": written}


def mask_cost(instance: Any, calls: int = 200) -> float:
    """Microseconds a token for the grammar's mask alone (computed, unpacked and applied to
    a row of logits), inside a string of the schema: the constraint's own work, without
    the model's step, which the decode figures cannot resolve on a noisy machine."""
    from coderai import grammar
    from coderai.engine.decoding.constraint import Constraint

    text = grammar.response_grammar({"type": "json_schema", "schema": SCHEMA})
    constraint = Constraint(instance.grammar_tokenizer(), text)
    assert constraint.accept_text('["apple","ban')  # compact JSON
    import numpy as np

    row = np.zeros(constraint.vocabulary, dtype=np.float32)
    began = time.perf_counter()
    for _ in range(calls):
        constraint.mask_numpy(row)  # compute, unpack and apply: what a step adds
    return 1e6 * (time.perf_counter() - began) / calls


def measure(backend: str, path: str, tokens: int, rounds: int) -> dict[str, Any]:
    instance = _load(backend, path)
    began = time.perf_counter()
    instance.grammar_tokenizer()
    vocabulary_s = time.perf_counter() - began
    mask_us = mask_cost(instance)
    decode(instance, False, 8)  # warm-up: first-call costs on neither side
    decode(instance, True, 8)
    runs: dict[str, list[dict[str, float]]] = {"free": [], "json_schema": []}
    for _ in range(rounds):
        runs["free"].append(decode(instance, False, tokens))
        runs["json_schema"].append(decode(instance, True, tokens))
    free = statistics.median(r["per_token_ms"] for r in runs["free"])
    constrained = statistics.median(r["per_token_ms"] for r in runs["json_schema"])
    return {
        "backend": backend,
        "free_ms_per_token": round(free, 2),
        "constrained_ms_per_token": round(constrained, 2),
        "free_tok_s": round(1000 / free, 1),
        "constrained_tok_s": round(1000 / constrained, 1),
        "cost_pct": round(100 * (constrained - free) / free, 1),
        "tokens_free": [r["tokens"] for r in runs["free"]],
        "tokens_constrained": [r["tokens"] for r in runs["json_schema"]],
        "vocabulary_build_s": round(vocabulary_s, 2),
        "mask_us": round(mask_us, 1),
    }


def main() -> None:
    from coderai.defaults import embedded_gguf

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=str(embedded_gguf()))
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "constrained.json")
    args = parser.parse_args()
    results = [
        measure(backend, args.model, args.tokens, args.rounds)
        for backend in ("llama.cpp", "transformers")
    ]
    save(
        {"model": Path(args.model).name, "tokens": args.tokens, "rounds": args.rounds,
         "results": results},
        args.out,
    )  # fmt: skip


if __name__ == "__main__":
    main()
