"""Are a token's logits the same whether its step decodes it alone or with others? What
decides whether speculation's text can equal plain decoding's.

    python -m bench.step_numerics [--lines 200] [--tokens 48] [--sizes 2,3,4,9] [--flash 0]

SmolLM2-135M-Instruct (the embedded Q4_1 GGUF) on llama.cpp's own API, one sequence, 2
threads: the prompt lookup bench's file is read, `--tokens` greedy tokens are decoded one
per step (plain decoding at one stream), then the same tokens are decoded again from the
same prompt in steps of k, every logit asked for (a verification step of k - 1 draft
tokens). Each position's logits are compared bit for bit with the one-token step's, and
each k's with the others': how many are identical, the largest difference, and the
positions where the greedy choice differs.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path
from typing import Any

from bench.lib.results import RESULTS, save
from bench.speculation import source_file
from coderai.catalogue.defaults import embedded_gguf


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import llama_cpp
    import numpy as np
    from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel

    llama_cpp.llama_backend_init()
    model_params = llama_cpp.llama_model_default_params()
    model_params.use_extra_bufts = False
    model = LlamaModel(path_model=str(embedded_gguf()), params=model_params, verbose=False)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = 8192, 512, 512, 1
    params.n_threads = params.n_threads_batch = 2
    params.flash_attn_type = args.flash
    params.no_perf = True
    ctx = LlamaContext(model=model, params=params, verbose=False)
    vocabulary = model.n_vocab()
    text = "```python\n" + source_file(args.lines) + "```\n"
    prompt = model.tokenize(text.encode(), add_bos=True, special=True)
    batch = LlamaBatch(n_tokens=512, embd=0, n_seq_max=1, verbose=False)
    memory = llama_cpp.llama_get_memory(ctx.ctx)

    def decode(tokens: list[int], start: int, every: bool) -> float:
        b = batch.batch
        for i, token in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i] = token, start + i, 1
            b.seq_id[i][0] = 0
            b.logits[i] = every or i == len(tokens) - 1
        b.n_tokens = len(tokens)
        began = time.perf_counter()
        if llama_cpp.llama_decode(ctx.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        return time.perf_counter() - began

    def logits(index: int) -> Any:
        row = llama_cpp.llama_get_logits_ith(ctx.ctx, index)
        return np.ctypeslib.as_array(row, (vocabulary,)).copy()

    for start in range(0, len(prompt), 512):
        decode(prompt[start : start + 512], start, False)
    depth = len(prompt)
    last = logits(len(prompt[(depth - 1) // 512 * 512 :]) - 1)
    tokens, alone = [], []
    for j in range(args.tokens):
        tokens.append(int(np.argmax(last)))
        decode(tokens[-1:], depth + j, False)
        last = logits(0)
        alone.append(last)
    by_size: dict[int, dict[int, Any]] = {}
    rows = []
    for k in [int(size) for size in args.sizes.split(",")]:
        llama_cpp.llama_memory_seq_rm(memory, 0, depth, -1)
        seen, seconds = by_size.setdefault(k, {}), []
        for j in range(0, args.tokens - k + 1, k):
            seconds.append(decode(tokens[j : j + k], depth + j, True))
            for i in range(k):
                seen[j + i] = logits(i)
        step_ms = round(1000 * statistics.median(seconds), 1)
        rows.append(compare(alone, seen, f"{k} against 1") | {"step_ms": step_ms})
    sizes = sorted(by_size)
    for a, b in itertools.pairwise(sizes):
        rows.append(compare(by_size[a], by_size[b], f"{b} against {a}"))
    return {"benchmark": "step_numerics", "model": Path(str(embedded_gguf())).name,
            "flash_attn": bool(args.flash), "depth": depth, "tokens": args.tokens,
            "rows": rows}  # fmt: skip


def compare(reference: Any, other: dict[int, Any], name: str) -> dict[str, Any]:
    import numpy as np

    positions = sorted(p for p in other if (p in reference if isinstance(reference, dict)
                                            else p < len(reference)))  # fmt: skip
    same = sum(bool((reference[p] == other[p]).all()) for p in positions)
    largest = max(float(np.abs(reference[p] - other[p]).max()) for p in positions)
    flips = [p for p in positions if int(np.argmax(reference[p])) != int(np.argmax(other[p]))]
    return {
        "steps": name,
        "identical": f"{same} of {len(positions)}",
        "largest_difference": round(largest, 3),
        "greedy_choice_differs_at": flips,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--sizes", default="2,3,4,9")
    parser.add_argument("--flash", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    suffix = "-flash" if args.flash else ""
    save(measure(args), args.out or RESULTS / f"step_numerics{suffix}.json")


if __name__ == "__main__":
    main()
