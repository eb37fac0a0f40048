"""One sequence in a batched llama.cpp context, and what a step decodes."""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from coderai.engine.backends.base import Sequence
from coderai.engine.backends.llamacpp.draft_policy import PRIOR_ACCEPTED, Shadow
from coderai.engine.backends.llamacpp.ngram import NgramIndex

if TYPE_CHECKING:  # names only: the planner and its tests run without llama.cpp
    from coderai.engine.backends.llamacpp.sampler import SamplerChain
    from coderai.engine.backends.llamacpp.vision import Images


@dataclass(eq=False)
class Slot:
    """One sequence in the context: its tokens, how many of them its cells hold, and
    where it stands in the line (docs/glossary.md: sequence, slot)."""

    seq: Sequence
    seq_id: int
    #: the prompt, then each token sampled
    tokens: list[int]
    sampler: SamplerChain
    decoder: codecs.IncrementalDecoder
    #: the most KV cells it can ever use, and whether the request bounded its length
    need: int
    bounded: bool
    #: tokens[:decoded] are in the KV cache
    decoded: int = 0
    admitted: bool = False
    #: admission order: the youngest is preempted first
    order: int = 0
    #: admitted at least once (a preempted sequence is admitted again)
    started: bool = False
    #: an older sequence reading the same prompt, and how many of its tokens this one
    #: copies once it has read them (n choices of one request share one prefill)
    leader: Slot | None = None
    shared: int = 0
    #: speculative decoding: the n-gram index of its tokens, and this step's draft
    ngrams: NgramIndex | None = None
    draft: list[int] = field(default_factory=list)
    #: the estimated chance that a draft token of its is accepted (draft_policy.py)
    accept_rate: float = PRIOR_ACCEPTED
    #: an n-gram draft not decoded (none paid), checked against what it samples next
    shadow: Shadow = field(default_factory=Shadow)
    #: its prompt's images, each read as a step of its own where it starts (vision.py)
    images: Images | None = None

    @property
    def reading(self) -> bool:
        """Whether it has prompt tokens (or re-read ones) left to read."""
        return len(self.tokens) - self.decoded > 1

    @property
    def answering(self) -> bool:
        """Whether it has sampled a token yet (its tokens are more than its prompt)."""
        return len(self.tokens) > self.seq.prompt_tokens


class Run(NamedTuple):
    """A sequence's tokens [first, end) decoded in a step."""

    slot: Slot
    first: int
    end: int


@dataclass(eq=False)
class Plan:
    """What one step decodes, and the sequences that could not grow to take part."""

    runs: list[Run] = field(default_factory=list)
    paused: list[Slot] = field(default_factory=list)
