"""Next-token choice from one row of logits: greedy at temperature 0, else top_k, temperature,
min_p and nucleus (top_p) sampling from the sequence's own seeded generator."""

from __future__ import annotations

from typing import Any

from coderai.bus.messages import Job


def choose_token(logits: Any, job: Job, generator: Any) -> int:
    import torch

    if job.temperature <= 0:
        return int(torch.argmax(logits))
    logits = logits.float()
    if 0 < job.top_k < logits.shape[-1]:
        kth = torch.topk(logits, job.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits / job.temperature, dim=-1)
    if job.min_p > 0:
        probs = probs.masked_fill(probs < job.min_p * probs.max(), 0.0)
    top_p = job.top_p
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        # keep the smallest prefix whose mass reaches top_p (always at least one token)
        outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= top_p
        sorted_probs[outside] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))


def make_generator(seed: int | None) -> Any:
    import torch

    generator = torch.Generator(device="cpu")
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator
