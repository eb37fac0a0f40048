"""Quantized KV caches against f16: greedy agreement and memory per token.

    python -m bench.kv_types [--model PATH] [--tokens 64]

Each of bench/batch_invariance.py's 8 chat prompts alone, greedy, on the engine's batched
llama.cpp instance driven in this process, with the KV cache in f16, q8_0 and q4_0 (both
quantized ones with flash attention, as llama.cpp needs for a quantized V cache; f16 is
also run with it, so that the comparison is of the cache type alone). Per type: how many
texts equal f16's, where the others first differ and how close the call was there, and
the KV bytes one token takes (the engine's own figure, from the GGUF's shape).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.batch_invariance import PROMPTS, compare, run
from bench.lib.results import RESULTS, save

TYPES = ["f16", "q8_0", "q4_0"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--out", type=Path, default=RESULTS / "kv_types.json")
    args = parser.parse_args()
    from coderai.bus.messages import ModelSpec
    from coderai.catalogue.defaults import embedded_gguf
    from coderai.catalogue.model_memory import KV_BYTES, bytes_per_token
    from coderai.engine.backends.base import LoadProgress
    from coderai.engine.backends.llamacpp.backend import LlamaCppBackend

    path = args.model or str(embedded_gguf())
    traces: dict[str, list[Any]] = {}
    per_token: dict[str, int] = {}
    for kind in TYPES:
        options = {"kv_cache": kind, "flash_attn": True, "prefix_cache_tokens": 0}
        instance: Any = LlamaCppBackend().load(
            ModelSpec("m", path, "gguf", options), LoadProgress()
        )
        traces[kind] = [run(instance, [p], args.tokens)[0] for p in PROMPTS]
        per_token[kind] = bytes_per_token(instance.model.metadata(), KV_BYTES[kind])
        del instance
    rows = []
    for kind in TYPES[1:]:
        found = [compare(a, b) for a, b in zip(traces["f16"], traces[kind], strict=True)]
        rows.append({"kv_cache": kind, "bytes_per_token": per_token[kind],
                     "of_f16": round(per_token[kind] / per_token["f16"], 3),
                     "same_as_f16": sum(f["same"] for f in found), "prompts": found})  # fmt: skip
    save({"model": Path(path).name, "tokens": args.tokens, "f16_bytes_per_token":
          per_token["f16"], "types": rows}, args.out)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
