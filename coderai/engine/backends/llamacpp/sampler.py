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

from coderai.bus.messages import Job
from coderai.engine.backends.base import token_biases

#: llama.cpp reads this seed as "pick one at random"
_RANDOM_SEED = 0xFFFFFFFF


def seed32(seed: int | None) -> int:
    """A 32-bit seed for llama.cpp's dist sampler: the request's, folded, or a fresh one."""
    if seed is None:
        return secrets.randbelow(_RANDOM_SEED)
    folded = (seed ^ (seed >> 32)) & 0xFFFFFFFF
    return folded - 1 if folded == _RANDOM_SEED else folded


class SamplerChain:
    """The stages llama.cpp's own common sampler runs, in its order: logit bias, penalties,
    then greedy, or top_k, top_p, min_p, temperature and a seeded draw."""

    def __init__(self, job: Job, vocabulary: int, window: int) -> None:
        import llama_cpp

        self._lib: Any = llama_cpp
        bias = token_biases(job.logit_bias, vocabulary)  # before anything is allocated
        self.chain = llama_cpp.llama_sampler_chain_init(
            llama_cpp.llama_sampler_chain_default_params()
        )
        for stage in self._stages(job, bias, vocabulary, window):
            llama_cpp.llama_sampler_chain_add(self.chain, stage)

    def _stages(self, job: Job, bias: dict[int, float], vocabulary: int, window: int) -> list[Any]:
        lib = self._lib
        stages = []
        if bias:
            entries = (lib.llama_logit_bias * len(bias))(*bias.items())
            stages.append(lib.llama_sampler_init_logit_bias(vocabulary, len(bias), entries))
        if job.frequency_penalty or job.presence_penalty:
            # only sampled tokens are accepted into the chain, so, as OpenAI's, the penalties
            # count the completion's tokens, not the prompt's; 1.0: no repeat penalty
            stages.append(lib.llama_sampler_init_penalties(
                vocabulary, window, 1.0, job.frequency_penalty, job.presence_penalty
            ))  # fmt: skip
        if job.temperature <= 0:
            return [*stages, lib.llama_sampler_init_greedy()]
        if job.top_k > 0:
            stages.append(lib.llama_sampler_init_top_k(job.top_k))
        if job.top_p < 1.0:
            stages.append(lib.llama_sampler_init_top_p(job.top_p, 1))
        if job.min_p > 0.0:
            stages.append(lib.llama_sampler_init_min_p(job.min_p, 1))
        stages.append(lib.llama_sampler_init_temp(job.temperature))
        stages.append(lib.llama_sampler_init_dist(seed32(job.seed)))
        return stages

    def sample(self, ctx: Any, index: int) -> int:
        """The token chosen from the logits at batch index `index` (and accepted, so that
        stateful stages see it)."""
        return int(self._lib.llama_sampler_sample(self.chain, ctx, index))

    def accept(self, token: int) -> None:
        """A token chosen without sampling (a forced one): the stateful stages (penalties)
        count it as they count a sampled one."""
        self._lib.llama_sampler_accept(self.chain, token)

    def close(self) -> None:
        if self.chain is not None:
            self._lib.llama_sampler_free(self.chain)
            self.chain = None
