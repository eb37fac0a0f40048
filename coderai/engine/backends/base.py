"""The contract between the engine's scheduler and a model backend.

A backend loads a model spec into an instance. The scheduler owns the decode loop: each
step it hands an instance the sequences that are due, and the instance returns one result
per sequence, so a backend that batches (transformers) and one that does not (fake) share
the loop, the stop-sequence handling and the cancellation points.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coderai.bus.kinds import JobKind
from coderai.bus.messages import Job, ModelSpec
from coderai.engine.decoding.stops import StopMatcher
from coderai.errors import ContextLengthExceeded, JobError


class _NoToken:
    """A step that yields no token for a sequence."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: what a step yields for one sequence: a token's text, END (end of sequence), no token
#: (READING: it read part of its prompt; PENDING: it waits, for KV room or its turn), an
#: error, or several tokens' texts in order (speculative decoding; END may close them). A
#: step in which every sequence waits moved nothing: the scheduler does not step that
#: instance again until something it waits for (a finish, a cancel, a resume) happens.
END = None
READING = _NoToken("READING")
PENDING = _NoToken("PENDING")
StepResult = str | None | Exception | _NoToken | list[str | None]


@dataclass(eq=False)
class Sequence:
    """One job inside an engine."""

    job: Job
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: prompt tokens whose KV state came from a prefix cache
    cached_tokens: int = 0
    #: prompt tokens in the KV cache now (a backend that reads a prompt over several
    #: steps keeps it, for the progress the front reports), and when it was last reported
    read: int = 0
    reported_at: float = 0.0
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
    #: structured output (engine/decoding/structured.py): the tool-call parser, the grammar on its
    #: logits (lazy: a call the model began, dropped once the call is whole), whether
    #: special tokens are rendered as text (call markers may be special tokens), and the
    #: log-probability entries of tokens sampled since the last step was published
    parser: Any = None
    #: the splitter of its reasoning from its answer (decoding/reasoning.py), and whether
    #: its prompt left a `<think>` open (set by the backend as it renders the prompt)
    reasoning: Any = None
    opened: bool = False
    #: its completion tokens that were reasoning (those read while or as it ended)
    reasoning_tokens: int = 0
    constraint: Any = None
    lazy: bool = False
    #: its calls as they stream, checked against their schemas once whole
    #: (decoding/call_check.py)
    call_check: Any = None
    #: its constraint is a call in the model's own format (reasoning free before it)
    own_format: bool = False
    #: token ids the next steps must choose, in order, whatever the logits say (a thinking
    #: budget's end marker: structured.budget); each backend takes them from the front
    forced: list[int] = field(default_factory=list)
    #: how many times its thinking budget forced an end (structured.budget)
    budget_forced: int = 0
    render_special: bool = False
    logprobs: list[Any] | None = None
    #: characters of text already sent for the entries still held in `logprobs`
    logprob_chars: int = 0
    #: set from the event loop's thread when a CANCEL arrives, before the scheduler
    #: thread takes it: a backend in the middle of a long step for it may stop there
    cancelled: bool = False
    #: its prompt's lead (engine/holdings.py), set as it starts by a backend that keeps
    #: prefixes (None: it keeps none, or the prompt is shorter than a lead)
    lead: int | None = None


def fit_prompt(seq: Sequence, prompt_tokens: int, context: int) -> None:
    """Record a prompt's length and the room its context leaves for the completion, so
    that prompt and completion together never exceed the context; refuse a prompt that
    leaves no room."""
    if prompt_tokens >= context:
        # OpenAI's wording, which clients match to shorten a conversation and retry
        what = "messages" if seq.job.kind == JobKind.CHAT else "prompt"
        raise JobError(
            ContextLengthExceeded.wording(context, prompt_tokens, what), kind="context_length"
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


def check_input_lengths(lengths: list[int], limit: int) -> None:
    """Refuse an embedding input of no tokens (its mean is no vector) or longer than the
    model embeds: a vector of its first `limit` tokens would silently describe another
    text."""
    for index, tokens in enumerate(lengths):
        if not tokens:
            raise JobError(f"input[{index}] has no tokens", kind="bad_request")
        if tokens > limit:
            raise JobError(
                f"input[{index}] has {tokens} tokens; this model embeds at most {limit}",
                kind="bad_request",
            )


def known_ids(ids: list[int], vocabulary: int, where: str) -> list[int]:
    """Token ids a request gave (a prompt, an input), each checked against the model's
    vocabulary: an id past it would index outside the embedding table, which on a GPU
    kills the whole context rather than failing one request."""
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocabulary:
            raise JobError(
                f"{where} has token id {token!r}; this model's vocabulary is 0..{vocabulary - 1}",
                kind="bad_request",
            )
    return list(ids)


#: a model's fill-in-the-middle tokens: (prefix, suffix, middle)
FimTokens = tuple[int, int, int]


def fill_in_the_middle(
    job: Job, fim: FimTokens | None, encode: Callable[[str], list[int]], bos: list[int]
) -> list[int]:
    """A completion job's prompt around the gap before its suffix, in the prefix-suffix-
    middle order FIM models are trained on (llama.cpp's server builds the same):
    [BOS] PRE prompt SUF suffix MID; the model writes the middle. `encode` tokenises text
    without special tokens; `bos` is the BOS the model puts before a prompt, if it does."""
    if fim is None:
        raise JobError(
            f"model {job.model.get('id', '?')} has no fill-in-the-middle tokens, so it"
            " cannot complete with a suffix",
            kind="bad_request",
        )
    pre, suf, mid = fim
    return [*bos, pre, *encode(job.prompt), suf, *encode(job.suffix), mid]


def as_prompt_job(job: Job) -> Job:
    """The chat or completion job whose prompt a tokenize job asks for, so that /tokenize
    counts exactly the tokens a generation request with the same text reads."""
    return dataclasses.replace(job, kind=JobKind.CHAT if job.messages else JobKind.COMPLETION)


#: an embedding job's inputs: texts, or token-id lists
EmbeddingInputs = list[str] | list[list[int]]


def input_ids(
    inputs: EmbeddingInputs, vocabulary: int, encode: Callable[[str], list[int]]
) -> list[list[int]]:
    """An embedding job's inputs as token ids: texts tokenised by `encode`, and token-id
    inputs checked against the vocabulary (embedded as given, never re-tokenised)."""
    items: list[str | list[int]] = list(inputs)
    return [
        known_ids(item, vocabulary, f"input[{i}]") if isinstance(item, list) else encode(item)
        for i, item in enumerate(items)
    ]


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

    #: llama.cpp's CPU extra buffer types are on for its weights (the test seam's
    #: `repack` rules fire only there: engine/die_at.py)
    extra_buffer_types: bool = False

    def unloaded(self) -> None:  # noqa: B027 - optional hook
        """The pool let the instance go (its memory goes with the last reference)."""

    def persist(self) -> None:  # noqa: B027 - optional hook
        """The engine stops: keep what would be lost where it outlives the process (the
        llama.cpp backend's prompt cache on disk). On the scheduler thread."""

    #: the model's tool-call format (tool_parse.FORMATS) for tool_choice "auto"
    tool_format: str = "hermes"
    #: how it writes its reasoning (reasoning.REASONING_FORMATS), for chat jobs
    reasoning_format: str = "none"
    #: the tags of its Hermes-like calls and of its thinking, where its template teaches
    #: tags of its own (template_probe.py)
    call_tags: tuple[str, str] = ("<tool_call>", "</tool_call>")
    think_tags: tuple[str, str] = ("<think>", "</think>")

    #: what /v1/models says of it once loaded (catalogue/model_facts.py): the window in tokens a
    #: sequence may fill (what tokenize reports; 0: no limit it knows), and whether its
    #: chat template renders tools itself (else the fallback prompt lists them)
    window: int = 0
    native_tools: bool = False

    def facts(self) -> dict[str, Any]:
        """Its facts for the heartbeat's resident report (bus checker: residents_of)."""
        return {"context": self.window, "tools": self.native_tools,
                "reasoning": self.reasoning_format != "none", "vision": False}  # fmt: skip

    def grammar_tokenizer(self) -> Any:
        """llguidance's view of the vocabulary (built once, on first use), or None for a
        model that cannot constrain its output."""
        return None

    def leads(self) -> set[int] | None:
        """The leads (engine/holdings.py) of the prefixes its caches keep; None for an
        instance that keeps no prefix between jobs (the heartbeat then names none of its
        model's conversations). On the scheduler thread: cheap, and never waiting on a
        lock another thread holds for long."""
        return None

    def stats(self) -> dict[str, int]:
        """Counters for the heartbeat and /metrics (summed over a model's instances):
        running and waiting sequences, KV cells, prefix cache use. Read on the scheduler
        thread."""
        return {}

    def embed(self, inputs: EmbeddingInputs) -> tuple[list[list[float]], int]:
        """One vector per input (a text, or token ids), and the tokens read."""
        raise JobError("this model does not produce embeddings", kind="unsupported")

    def tokenize(self, job: Job) -> tuple[list[int], int]:
        """The token ids the model reads for a tokenize job's prompt or messages (those of
        the same completion or chat job), and the model's context in tokens."""
        raise JobError("this model cannot tokenize", kind="unsupported")

    def detokenize(self, ids: list[int]) -> str:
        """The text of token ids, special tokens included."""
        raise JobError("this model cannot detokenize", kind="unsupported")

    def marker_ids(self, text: str) -> list[int]:
        """The token ids of a marker the model writes (`</think>`), special tokens parsed
        as such; [] for a model that cannot say."""
        return []


class Backend(abc.ABC):
    def instance_spec(self, spec: ModelSpec, kind: str) -> ModelSpec:
        """The spec of the instance that serves a job of this kind (a backend may need a
        differently configured instance for embeddings)."""
        return spec

    @abc.abstractmethod
    def load(self, spec: ModelSpec, progress: LoadProgress) -> ModelInstance:
        """Load a model (blocking; runs on the engine's loader thread)."""

    def facts(self) -> dict[str, Any]:
        """What the backend decided about this machine, for the heartbeat (llama.cpp: its
        extra buffer types); called from the event loop."""
        return {}


class LoadProgress:
    """Written by the loader thread, read by the heartbeat: a float store is atomic."""

    def __init__(self) -> None:
        self.fraction = 0.0
