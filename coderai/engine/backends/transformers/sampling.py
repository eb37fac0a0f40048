"""Next-token choice from one row of logits, in the order llama.cpp's sampler chain runs
(llamacpp/sampler.py), so that one request samples from the same distribution on either
backend: logit_bias and the penalties (adjust_logits, for greedy requests too), then
top_k, top_p and min_p on the probabilities before temperature, then temperature, then a
draw from the sequence's own seeded generator (choose_token)."""

from __future__ import annotations

from typing import Any

from coderai.bus.messages import Job


def choose_token(logits: Any, job: Job, generator: Any) -> int:
    import torch

    logits = logits.float()
    if 0 < job.top_k < logits.shape[-1]:
        kth = torch.topk(logits, job.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if job.top_p < 1.0 or job.min_p > 0:
        probs = torch.softmax(logits, dim=-1)
        keep = torch.ones_like(probs, dtype=torch.bool)
        if job.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            # the smallest prefix whose mass reaches top_p (always at least one token)
            inside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < job.top_p
            keep = torch.zeros_like(keep).scatter_(-1, order, inside)
        if job.min_p > 0:
            keep &= probs >= job.min_p * probs.max()
        logits = logits.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(logits / job.temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def adjust_logits(row: Any, job: Job, bias: dict[int, float], counts: dict[int, int]) -> None:
    """OpenAI's logit_bias, then its presence and frequency penalties over the tokens this
    completion has produced so far, applied to one row of logits in place."""
    import torch

    if bias:
        row[torch.tensor(list(bias))] += torch.tensor(list(bias.values()))
    if counts and (job.frequency_penalty or job.presence_penalty):
        seen = torch.tensor(list(counts))
        times = torch.tensor(list(counts.values()), dtype=row.dtype)
        row[seen] -= times * job.frequency_penalty + job.presence_penalty


def make_generator(seed: int | None) -> Any:
    import torch

    generator = torch.Generator(device="cpu")
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator
