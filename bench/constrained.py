"""What a JSON-schema constraint costs a decoding model: one sequence decoded greedily with
and without llguidance's mask, on both backends, in alternating rounds (A B A B ...), in
one run. The engine's own instances are driven in this process, so the figures are the
model's step plus the constraint's work (mask, apply, advance), nothing of HTTP.

    python -m bench.constrained [--model PATH] [--tokens 96] [--rounds 5] [--parsing-only]

Like with like: both sides decode the same prompt for `tokens` steps; the constrained side
writes a JSON array of at least 64 short strings (it cannot end before `tokens`), the free
side writes whatever it likes, and a side that ends early is measured over the tokens it
wrote (the token counts are in the result). Prompt reading is excluded: the clock starts
at the first token. What this does not show: a schema with large alternations (anyOf over
many tools) costs more per mask; the first use of a model builds llguidance's view of its
vocabulary (timed separately).

Then what reading each output format costs the engine a token while it streams
(`parse_costs`): the same raw text of each format (prose, then reasoning or calls in that
format's markup), in the same 4-character pieces, through the scheduler's own delta step
(`Scheduler._emit`: stop sequences aside, the reasoning splitter or harmony reader, the
call parser, the delta map), against that same text sent as plain text (no parser: the
path a model without reasoning or tools takes). No model: the figure is the reading alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.lib.results import RESULTS, save

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
    from coderai.engine.backends.base import END, PENDING, READING, Sequence
    from coderai.engine.decoding import structured

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
    from coderai.common import grammar
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


#: each format's raw output after PROSE: (tool_format, reasoning_format, text)
_ARGS = json.dumps({"path": "src/app.py", "line": 42, "text": "print('hello, world')"})
_V31 = "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>"
FORMATS: dict[str, tuple[str, str, str]] = {
    "hermes": ("hermes", "none",
               f'<tool_call>\n{{"name": "edit", "arguments": {_ARGS}}}\n</tool_call>'),
    "mistral": ("mistral", "none", f'[TOOL_CALLS][{{"name": "edit", "arguments": {_ARGS}}}]'),
    "qwen3_coder": ("qwen3_coder", "none", "<tool_call>\n<function=edit>\n<parameter=path>\n"
                    "src/app.py\n</parameter>\n<parameter=line>\n42\n</parameter>\n"
                    "</function>\n</tool_call>"),
    "glm45": ("glm45", "none", "<tool_call>edit\n<arg_key>path</arg_key>\n<arg_value>src/app.py"
              "</arg_value>\n<arg_key>line</arg_key>\n<arg_value>42</arg_value>\n</tool_call>"),
    "deepseek_v31": ("deepseek_v31", "none", f"{_V31}edit<\uff5ctool\u2581sep\uff5c>{_ARGS}"
                     "<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>"),
    "kimi_k2": ("kimi_k2", "none", "<|tool_calls_section_begin|><|tool_call_begin|>functions.edit:0"
                f"<|tool_call_argument_begin|>{_ARGS}<|tool_call_end|><|tool_calls_section_end|>"),
    "think": ("hermes", "think", "<think>\n{prose}\n</think>\n\nDone."),
    "harmony": ("harmony", "harmony", "<|channel|>analysis<|message|>{prose}<|end|><|start|>"
                f"assistant<|channel|>commentary to=functions.edit <|constrain|>json<|message|>"
                f"{_ARGS}<|call|>"),
}  # fmt: skip
PROSE = (
    "The function reads the file, then the loop walks its lines and keeps those that match;"
    " nothing is written until the end, so a failure leaves the file as it was. "
) * 8
PIECE_CHARS = 4
TOOL = {"type": "function", "function": {"name": "edit", "parameters": {"type": "object",
        "properties": {"path": {"type": "string"}, "line": {"type": "integer"},
                       "text": {"type": "string"}}}}}  # fmt: skip


def _stream(fmt: str, parsed: bool, pieces: list[str]) -> float:
    """Seconds for one pass of the pieces through Scheduler._emit."""
    import asyncio

    from coderai.bus.messages import Job
    from coderai.engine.backends.base import Sequence
    from coderai.engine.backends.fake import FakeBackend, FakeInstance
    from coderai.engine.decoding import structured
    from coderai.engine.outbox import Outbox
    from coderai.engine.scheduler import Scheduler

    tool_format, reasoning_format, _ = FORMATS[fmt]
    loop = asyncio.new_event_loop()
    scheduler = Scheduler({"fake": FakeBackend()}, Outbox(loop), slots=1)
    job = Job(1, {}, "chat", messages=[{"role": "user", "content": "go"}], tools=[TOOL],
              tool_choice="auto" if parsed else "none")  # fmt: skip
    seq = Sequence(job)
    options = {"tool_format": tool_format, "reasoning_format": reasoning_format}
    instance = FakeInstance(options if parsed else {})
    seq.instance = instance
    structured.prepare(seq, instance)
    emit, deltas = scheduler._emit, scheduler._deltas
    began = time.perf_counter()
    for piece in pieces:
        emit(seq, piece)
        if len(deltas) > 256:  # what the scheduler's publishing takes away
            deltas.clear()
    emit(seq, "", end=True, token=False)
    spent = time.perf_counter() - began
    loop.close()
    return spent


def parse_costs(rounds: int) -> list[dict[str, Any]]:
    out = []
    for fmt, (_, _, markup) in FORMATS.items():
        text = PROSE + markup.replace("{prose}", PROSE)
        pieces = [text[i : i + PIECE_CHARS] for i in range(0, len(text), PIECE_CHARS)]
        _stream(fmt, True, pieces)  # warm-up
        plain, parsed = [], []
        for _ in range(rounds):
            plain.append(_stream(fmt, False, pieces))
            parsed.append(_stream(fmt, True, pieces))
        plain_us = 1e6 * statistics.median(plain) / len(pieces)
        parsed_us = 1e6 * statistics.median(parsed) / len(pieces)
        out.append({"format": fmt, "tokens": len(pieces), "plain_us": round(plain_us, 2),
                    "parsed_us": round(parsed_us, 2),
                    "extra_us": round(parsed_us - plain_us, 2)})  # fmt: skip
    return out


def main() -> None:
    from coderai.catalogue.defaults import embedded_gguf

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=str(embedded_gguf()))
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "constrained.json")
    parser.add_argument(
        "--parsing-only",
        action="store_true",
        help="measure the formats' reading only; keep the saved decode rows",
    )
    args = parser.parse_args()
    parsing = parse_costs(max(args.rounds, 9))
    if args.parsing_only:
        saved = json.loads(args.out.read_text())
        save({**saved, "parsing": parsing, "parsing_rounds": max(args.rounds, 9)}, args.out)
        return
    results = [
        measure(backend, args.model, args.tokens, args.rounds)
        for backend in ("llama.cpp", "transformers")
    ]
    save(
        {"model": Path(args.model).name, "tokens": args.tokens, "rounds": args.rounds,
         "results": results, "parsing": parsing, "parsing_rounds": max(args.rounds, 9)},
        args.out,
    )  # fmt: skip


if __name__ == "__main__":
    main()
