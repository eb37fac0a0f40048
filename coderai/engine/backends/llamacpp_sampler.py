"""One llama.cpp sampler chain per sequence.

Each sequence owns its chain, and so its random state: a seeded request is reproducible
whatever runs beside it, and an unseeded one draws a fresh seed (llama.cpp's own default
would be one process-wide state). A chain is a list of stages, so a later stage (a grammar,
penalties, logit bias) is one more `llama_sampler_chain_add` in `build`, and the token
chosen at a batch index can be read back with its probabilities from the same context.
"""

from __future__ import annotations

import secrets
from typing import Any

#: llama.cpp reads this seed as "pick one at random"
_RANDOM_SEED = 0xFFFFFFFF


def seed32(seed: int | None) -> int:
    """A 32-bit seed for llama.cpp's dist sampler: the request's, folded, or a fresh one."""
    if seed is None:
        return secrets.randbelow(_RANDOM_SEED)
    folded = (seed ^ (seed >> 32)) & 0xFFFFFFFF
    return folded - 1 if folded == _RANDOM_SEED else folded


class SamplerChain:
    def __init__(
        self,
        temperature: float,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        seed: int | None = None,
    ) -> None:
        import llama_cpp

        self._lib: Any = llama_cpp
        self.chain = llama_cpp.llama_sampler_chain_init(
            llama_cpp.llama_sampler_chain_default_params()
        )
        for stage in self._stages(temperature, top_p, top_k, min_p, seed):
            llama_cpp.llama_sampler_chain_add(self.chain, stage)

    def _stages(
        self, temperature: float, top_p: float, top_k: int, min_p: float, seed: int | None
    ) -> list[Any]:
        lib = self._lib
        if temperature <= 0:
            return [lib.llama_sampler_init_greedy()]
        stages = []
        if top_k > 0:
            stages.append(lib.llama_sampler_init_top_k(top_k))
        if top_p < 1.0:
            stages.append(lib.llama_sampler_init_top_p(top_p, 1))
        if min_p > 0.0:
            stages.append(lib.llama_sampler_init_min_p(min_p, 1))
        stages.append(lib.llama_sampler_init_temp(temperature))
        stages.append(lib.llama_sampler_init_dist(seed32(seed)))
        return stages

    def sample(self, ctx: Any, index: int) -> int:
        """The token chosen from the logits at batch index `index` (and accepted, so that
        stateful stages see it)."""
        return int(self._lib.llama_sampler_sample(self.chain, ctx, index))

    def close(self) -> None:
        if self.chain is not None:
            self._lib.llama_sampler_free(self.chain)
            self.chain = None
