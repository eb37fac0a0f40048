"""Does a sequence's greedy text depend on what runs beside it? One model, the engine's
batched llama.cpp instance driven in this process: each prompt alone, then all of them in
one batch, and (with the prefix cache) each prompt resent after itself. Where two texts
differ, the logits at the first differing token say how close the call was.

    python -m bench.batch_invariance [--model PATH] [--kv f16] [--tokens 64]

Default model: the embedded SmolLM2-135M-Instruct (Q4_1).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.lib.results import RESULTS, save

PROMPTS = [
    "What is the capital of France? Answer with one word.",
    "Write a short poem about the sea.",
    "Explain what a hash map is.",
    "List five fruits.",
    "How do I reverse a list in Python?",
    "Describe a sunset in two sentences.",
    "What is 17 times 23?",
    "Give me a name for a cat.",
]


def run(instance: Any, prompts: list[str], tokens: int) -> list[list[tuple[int, list[float]]]]:
    """Each prompt's chosen tokens with the logits they were chosen from, all prompts in
    one batch (a list of one prompt runs it alone)."""
    import numpy as np

    from coderai.bus.messages import Job
    from coderai.engine.backends.base import END, PENDING, READING, Sequence
    from coderai.engine.backends.llamacpp import sampler as llamacpp_sampler

    lib = llamacpp_sampler.SamplerChain
    trace: dict[int, list[tuple[int, list[float]]]] = {}
    original = lib.sample
    n_vocab = instance.model.n_vocab()

    def recording(self: Any, ctx: Any, index: int) -> int:
        import llama_cpp

        row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, index), (n_vocab,))
        chosen = original(self, ctx, index)
        trace.setdefault(id(self), []).append((chosen, row.copy().tolist()))
        return chosen

    lib.sample = recording  # type: ignore[method-assign]
    try:
        seqs = []
        for i, prompt in enumerate(prompts):
            job = Job(i, {}, "chat", messages=[{"role": "user", "content": prompt}],
                      max_tokens=tokens, temperature=0.0)  # fmt: skip
            seq = Sequence(job=job)
            instance.start(seq)
            seqs.append(seq)
        samplers = [id(s.state.sampler) for s in seqs]
        live = list(seqs)
        while live:
            for seq, result in zip(list(live), instance.step(live), strict=True):
                if result is PENDING or result is READING:
                    continue
                if result is not END:
                    seq.completion_tokens += 1
                if result is END or seq.completion_tokens >= tokens:
                    live.remove(seq)
                    instance.release(seq)
    finally:
        lib.sample = original  # type: ignore[method-assign]
    return [trace.get(key, []) for key in samplers]


def compare(a: list[tuple[int, list[float]]], b: list[tuple[int, list[float]]]) -> dict[str, Any]:
    for k, ((ta, la), (tb, lb)) in enumerate(zip(a, b, strict=False)):
        if ta != tb:
            return {
                "same": False,
                "first_difference": k,
                # how far apart the two candidates were, in each run's own logits
                "gap_alone": la[ta] - la[tb],
                "gap_other": lb[tb] - lb[ta],
            }
    return {"same": len(a) == len(b), "first_difference": None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=None)
    parser.add_argument("--kv", default="f16")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=RESULTS / "batch_invariance.json")
    args = parser.parse_args()
    from coderai.bus.messages import ModelSpec
    from coderai.catalogue.defaults import embedded_gguf
    from coderai.engine.backends.base import LoadProgress
    from coderai.engine.backends.llamacpp.backend import LlamaCppBackend

    path = args.model or str(embedded_gguf())
    options = {"parallel": len(PROMPTS), "kv_cache": args.kv}
    cold = LlamaCppBackend().load(
        ModelSpec("m", path, "gguf", {**options, "prefix_cache_tokens": 0}), LoadProgress()
    )
    alone = [run(cold, [p], args.tokens)[0] for p in PROMPTS]
    together = run(cold, PROMPTS, args.tokens)
    cached = LlamaCppBackend().load(ModelSpec("m", path, "gguf", options), LoadProgress())
    resent = []
    for p in PROMPTS:
        run(cached, [p], args.tokens)
        resent.append(run(cached, [p], args.tokens)[0])  # all but its last token cached
    batched = [compare(a, b) for a, b in zip(alone, together, strict=True)]
    cache = [compare(a, b) for a, b in zip(alone, resent, strict=True)]
    result = {
        "benchmark": "batch_invariance",
        "model": Path(path).name,
        "kv_cache": args.kv,
        "tokens": args.tokens,
        "batched_same": sum(c["same"] for c in batched),
        "resent_same": sum(c["same"] for c in cache),
        "prompts": len(PROMPTS),
        "batched": batched,
        "resent": cache,
    }
    save(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
