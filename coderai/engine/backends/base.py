"""The contract between the engine's scheduler and a model backend.

A backend loads a model spec into an instance. The scheduler owns the decode loop: each
step it hands an instance the sequences that are due, and the instance returns one result
per sequence, so a backend that batches (transformers) and one that does not (fake) share
the loop, the stop-sequence handling and the cancellation points.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from coderai.bus.messages import Job, JobKind, ModelSpec
from coderai.engine.stops import StopMatcher
from coderai.errors import JobError


class _NoToken:
    """A step that yields no token for a sequence."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: what a step yields for one sequence: a token's text, END (end of sequence), no token
#: (READING: it read part of its prompt; PENDING: it waits, for KV room or its turn) or an
#: error. A step in which every sequence waits moved nothing: the scheduler does not step
#: that instance again until something it waits for (a finish, a cancel, a resume) happens.
END = None
READING = _NoToken("READING")
PENDING = _NoToken("PENDING")
StepResult = str | None | Exception | _NoToken


@dataclass(eq=False)
class Sequence:
    """One job inside an engine."""

    job: Job
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: prompt tokens whose KV state came from a prefix cache
    cached_tokens: int = 0
    #: completion tokens the model's context holds after the prompt: the sequence ends
    #: with "length" there, as it does at max_tokens
    room: int = 1 << 30
    #: completion tokens after which it ends with "length" (set by the scheduler at start)
    limit: int = 1 << 30
    #: backend-private decoding state (KV cache handle, RNG, …)
    state: Any = None
    stopper: StopMatcher = field(default_factory=lambda: StopMatcher([]))
    #: the instance running it, and that instance's pool key
    instance: ModelInstance | None = None
    key: str = ""


def fit_prompt(seq: Sequence, prompt_tokens: int, context: int) -> None:
    """Record a prompt's length and the room its context leaves for the completion, so
    that prompt and completion together never exceed the context; refuse a prompt that
    leaves no room."""
    if prompt_tokens >= context:
        # OpenAI's wording, which clients match to shorten a conversation and retry
        what = "messages" if seq.job.kind == JobKind.CHAT else "prompt"
        raise JobError(
            f"This model's maximum context length is {context} tokens. However, your {what}"
            f" resulted in {prompt_tokens} tokens. Please reduce the length of the {what}.",
            kind="context_length",
        )
    seq.prompt_tokens = prompt_tokens
    seq.room = context - prompt_tokens


def token_biases(bias: dict[str, float], vocabulary: int) -> dict[int, float]:
    """A request's logit_bias with its keys as token ids of this model; a token the model
    does not have is refused, not skipped."""
    out = {int(key): value for key, value in bias.items()}
    for token in out:
        if token >= vocabulary:
            raise JobError(
                f"logit_bias names token {token}; this model has {vocabulary} tokens",
                kind="bad_request",
            )
    return out


def completion_limit(max_tokens: int | None, room: int) -> int:
    """Where a completion ends with "length": at the request's max_tokens, or where the
    model's context is full, whichever comes first. Stopping there, rather than when a
    backend fails to decode past its context, keeps the text generated so far."""
    return room if max_tokens is None else min(max_tokens, room)


def refuse_long_inputs(lengths: list[int], limit: int) -> None:
    """Refuse an embedding input longer than the model embeds: a vector of its first
    `limit` tokens would silently describe another text."""
    for index, tokens in enumerate(lengths):
        if tokens > limit:
            raise JobError(
                f"input[{index}] has {tokens} tokens; this model embeds at most {limit}",
                kind="bad_request",
            )


class ModelInstance(abc.ABC):
    #: seconds between steps; 0 means as fast as the hardware goes
    step_interval: float = 0.0
    #: sequences this instance decodes at once
    capacity: int = 1 << 30
    #: whether step() may leave some running sequences out (held ones); a backend that
    #: decodes all its rows in one pass cannot
    can_hold: bool = True

    @abc.abstractmethod
    def start(self, seq: Sequence) -> None:
        """Prepare a sequence (tokenise, seed); raise JobError for bad parameters."""

    @abc.abstractmethod
    def step(self, seqs: list[Sequence]) -> list[StepResult]:
        """Advance each sequence by one token."""

    def release(self, seq: Sequence) -> None:  # noqa: B027 - optional hook
        """Free a finished sequence's resources."""

    def stats(self) -> dict[str, int]:
        """Counters for the heartbeat and /metrics (summed over a model's instances):
        running and waiting sequences, KV cells, prefix cache use. Read on the scheduler
        thread."""
        return {}

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """One vector per text, and the tokens read."""
        raise JobError("this model does not produce embeddings", kind="unsupported")


class Backend(abc.ABC):
    def instance_spec(self, spec: ModelSpec, kind: str) -> ModelSpec:
        """The spec of the instance that serves a job of this kind (a backend may need a
        differently configured instance for embeddings)."""
        return spec

    @abc.abstractmethod
    def load(self, spec: ModelSpec, progress: LoadProgress) -> ModelInstance:
        """Load a model (blocking; runs on the engine's loader thread)."""


class LoadProgress:
    """Written by the loader thread, read by the heartbeat: a float store is atomic."""

    def __init__(self) -> None:
        self.fraction = 0.0
