"""Every message that crosses the bus, declared in one place.

A message is a frozen record; its msgpack body is the dict of its fields. Decoding checks
each field's type against the record's declaration so that a malformed body is rejected at
the edge (invariant 4) rather than deep inside a handler. Unknown keys are ignored, which
lets a newer peer add optional fields without a version bump.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from coderai.errors import (
    BusProtocolError,
    CoderaiError,
    ContextLengthExceeded,
    EngineFailed,
    InvalidRequest,
    ModelFileError,
)


class EngineState(enum.StrEnum):
    """What an engine says it is doing, in each HEARTBEAT."""

    READY = "ready"
    LOADING = "loading"  #: a model load is under way (it serves its other models)


class ControlAction(enum.StrEnum):
    LOAD = "load"  #: args {"model": spec}: load it now
    UNLOAD = "unload"  #: args {"model": id}: unload its idle instances
    CONFIG = "config"  #: args: the settings WELCOME carries, changed while it runs
    SHUTDOWN = "shutdown"  #: leave the bus and exit (for a host that cannot signal it)
    #: a remote engine (which no host can restart) ends its jobs and joins again as a new
    #: incarnation, its models still loaded
    RECONNECT = "reconnect"


class FinishReason(enum.StrEnum):
    STOP = "stop"  #: the model ended, or a stop sequence matched
    LENGTH = "length"  #: max_tokens, or the model's context, is full
    CANCELLED = "cancelled"  #: the front cancelled it
    TOOL_CALLS = "tool_calls"  #: the model called one or more tools


class JobKind(enum.StrEnum):
    CHAT = "chat"
    COMPLETION = "completion"
    EMBEDDING = "embedding"
    TOKENIZE = "tokenize"  #: the token ids of a prompt or messages, answered with TOKENS
    DETOKENIZE = "detokenize"  #: the text of prompt_ids, answered with TOKENS


class FailKind(enum.StrEnum):
    """Why an engine failed a job. Next to each: may the job run on another engine, and
    what the client is told (only the front turns these into HTTP)."""

    BUSY = "busy"  #: no free slot (a confused front): retried elsewhere
    BAD_REQUEST = "bad_request"  #: the request's fault (a bad parameter): 400
    CONTEXT_LENGTH = "context_length"  #: the prompt fills the context: 400 with OpenAI's code
    UNSUPPORTED = "unsupported"  #: the model cannot do it (embeddings): 400
    BAD_JOB = "bad_job"  #: the JOB did not make sense to the engine: 503
    MODEL_FILE = "model_file"  #: missing or unreadable model file: 503 model_file_error
    BAD_MODEL = "bad_model"  #: the catalogue entry's options are wrong: 503
    LOAD_FAILED = "load_failed"  #: the model failed to load: 503
    MODEL_ERROR = "model_error"  #: the model failed while generating: 503
    BACKEND_ERROR = "backend_error"  #: a backend bug: 503

    @property
    def retryable(self) -> bool:
        """May a job that produced nothing run on another engine after this?"""
        return self is FailKind.BUSY

    def error(self, engine: str, message: str) -> CoderaiError:
        if self in (FailKind.BAD_REQUEST, FailKind.UNSUPPORTED):
            return InvalidRequest(message)
        if self is FailKind.CONTEXT_LENGTH:
            return ContextLengthExceeded(message)
        if self is FailKind.MODEL_FILE:
            return ModelFileError(message)
        return EngineFailed(f"engine {engine}: {message}")

    @classmethod
    def of(cls, kind: str) -> FailKind:
        """A kind from the wire; one this side does not know is a backend error."""
        try:
            return cls(kind)
        except ValueError:
            return cls.BACKEND_ERROR


class MsgType(enum.IntEnum):
    # engine -> front
    HELLO = 1
    HEARTBEAT = 2
    CHUNKS = 3  #: deltas of many jobs from one engine step (or several merged steps)
    DONE = 4
    FAIL = 5
    BYE = 7
    EMBEDDINGS = 8
    TOKENS = 9  #: a tokenize or detokenize job's answer
    PROMPT = 10  #: a job's prompt admitted (its tokens counted), and how far it is read
    # front -> engine
    WELCOME = 16
    REFUSE = 17  #: HELLO rejected (bad token, protocol version): the engine must exit
    JOB = 18
    CANCEL = 19
    CONTROL = 20
    PING = 21
    HOLD = 22  #: the job's client lags: stop decoding it and keep its output back
    RESUME = 23  #: the client caught up: go on


@dataclass(frozen=True, slots=True)
class Message:
    TYPE: ClassVar[MsgType]

    def body(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True, slots=True)
class Hello(Message):
    TYPE = MsgType.HELLO
    name: str
    epoch: int
    pid: int
    backend: str
    capabilities: list[str]
    slots: int
    token: str
    gpus: list[str] = field(default_factory=list)
    #: a node (a whole `coderai run` joined as one engine): the models of its own
    #: catalogue, [{id, format, alias}], which its head lists and routes to it
    models: list[Any] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Heartbeat(Message):
    TYPE = MsgType.HEARTBEAT
    state: str  #: EngineState
    loaded: list[str] = field(default_factory=list)
    loading: dict[str, float] = field(default_factory=dict)  #: model id -> progress 0..1
    rss: int = 0
    #: per model id, counters such as running and waiting sequences and KV cells used
    #: (checked by the front with model_counters)
    models: dict[str, Any] = field(default_factory=dict)
    #: why the engine pauses to cool, if it does: {sensor, card, vendor, temp, high,
    #: resume, since} (checked by the front with cooldown_of)
    cooldown: dict[str, Any] | None = None
    #: per GPU it owns: {vendor, temp, vram_total_mb, vram_used_mb} (numbers may be None)
    gpus: dict[str, Any] = field(default_factory=dict)
    #: its resident models: [{model, mb, busy, idle_for (seconds)}] (checked with
    #: residents_of); under the fleet's RAM cap: the memory its loads wait for, the room
    #: under the cap at its last measure of the fleet (None: no cap; negative: the fleet
    #: is over it), what its loads in flight have yet to take, and how many measures it
    #: has taken (a PING's answer repeats the last one)
    residents: list[Any] = field(default_factory=list)
    wants_mb: float = 0.0
    room_mb: float | None = None
    coming_mb: float = 0.0
    measures: int = 0


#: what a node may offer: the formats a catalogue entry may have, and how many models
#: with names how long (a node is trusted with its key, not with the head's memory)
OFFERED_FORMATS = ("fake", "gguf", "transformers")
MAX_OFFERED = 1024
MAX_NAME = 256


def offered_models(models: object) -> list[dict[str, Any]]:
    """A node's HELLO.models, checked: maps of an id, a known format and an optional
    alias (strings)."""
    if (
        not isinstance(models, list)
        or len(models) > MAX_OFFERED
        or not all(
            isinstance(m, dict)
            and isinstance(m.get("id"), str)
            and 0 < len(m["id"]) <= MAX_NAME
            and m.get("format") in OFFERED_FORMATS
            and (
                m.get("alias") is None
                or (isinstance(m["alias"], str) and len(m["alias"]) <= MAX_NAME)
            )
            for m in models
        )
    ):
        raise BusProtocolError(f"HELLO.models {models!r} is malformed")
    return models


def is_number(value: object, least: float = float("-inf"), *, above: bool = False) -> bool:
    """A finite number from msgpack (an int or a float, never a bool, never inf or nan) of
    at least `least` (with `above`, more than it): the one check every numeric field takes
    at the edge."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return value > least if above else value >= least


def cooldown_of(cooldown: object) -> dict[str, Any] | None:
    """A HEARTBEAT's cooldown, checked: None, or the sensor that is hot and since when."""
    if cooldown is None:
        return None
    if (
        not isinstance(cooldown, dict)
        or cooldown.get("sensor") not in ("cpu", "gpu")
        or not is_number(cooldown.get("since"))
    ):
        raise BusProtocolError(f"HEARTBEAT.cooldown {cooldown!r} is malformed")
    return cooldown


def gpu_readings(gpus: object) -> dict[str, dict[str, Any]]:
    """A HEARTBEAT's per-card readings, checked: ids to maps of a vendor and numbers
    (None where the card gives no reading)."""
    if not isinstance(gpus, dict) or not all(
        isinstance(card, str)
        and isinstance(reading, dict)
        and isinstance(reading.get("vendor"), str)
        and all(
            reading.get(k) is None or is_number(reading.get(k))
            for k in ("temp", "vram_total_mb", "vram_used_mb")
        )
        for card, reading in gpus.items()
    ):
        raise BusProtocolError(f"HEARTBEAT.gpus {gpus!r} is malformed")
    return gpus


def residents_of(residents: object) -> list[dict[str, Any]]:
    """A HEARTBEAT's resident models, checked."""
    if not isinstance(residents, list) or not all(
        isinstance(r, dict)
        and isinstance(r.get("model"), str)
        and isinstance(r.get("busy"), bool)
        and is_number(r.get("mb"), 0)
        and is_number(r.get("idle_for"), 0)
        for r in residents
    ):
        raise BusProtocolError(f"HEARTBEAT.residents {residents!r} is malformed")
    return residents


def model_counters(models: dict[str, Any]) -> dict[str, dict[str, int]]:
    """A HEARTBEAT's per-model counters, checked: names to maps of names to integers."""
    for model, counters in models.items():
        if not isinstance(counters, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in counters.items()
        ):
            raise BusProtocolError(f"HEARTBEAT.models[{model!r}] is not a map of counters")
    return models


@dataclass(frozen=True, slots=True)
class Chunks(Message):
    """Flat [job_id, text, job_id, text, ...]: one message per engine step for all jobs."""

    TYPE = MsgType.CHUNKS
    deltas: list[Any]


@dataclass(frozen=True, slots=True)
class Done(Message):
    TYPE = MsgType.DONE
    job_id: int
    finish_reason: str  #: "stop" | "length" | "cancelled"
    prompt_tokens: int
    completion_tokens: int
    #: prompt tokens read from the prefix cache instead of being computed
    cached_tokens: int = 0
    #: the stop string that ended the text ("" if none did; Anthropic's clients read it)
    stop_sequence: str = ""


@dataclass(frozen=True, slots=True)
class Fail(Message):
    TYPE = MsgType.FAIL
    job_id: int
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class Embeddings(Message):
    """The vectors of an embedding job, sent just before its DONE."""

    TYPE = MsgType.EMBEDDINGS
    job_id: int
    vectors: list[Any]


@dataclass(frozen=True, slots=True)
class Tokens(Message):
    """A tokenize job's token ids and the context of the model that read them, or a
    detokenize job's text: sent just before its DONE."""

    TYPE = MsgType.TOKENS
    job_id: int
    ids: list[int] = field(default_factory=list)
    text: str = ""
    context: int = 0


@dataclass(frozen=True, slots=True)
class Prompt(Message):
    """How far a job's prompt is read: sent once the job is admitted, its prompt counted
    (`tokens`), and again as the prompt is read, a few times a second at most. A long
    prompt takes minutes on a CPU: with this the front opens the stream at admission,
    with the real input count, and reports progress while the prompt is read, instead
    of staying silent until the first token (agents give up on silence)."""

    TYPE = MsgType.PROMPT
    job_id: int
    tokens: int
    #: prompt tokens in the model's KV cache now, those from the prefix cache included
    read: int = 0
    #: prompt tokens taken from the prefix cache (known once the prompt is placed)
    cached: int = 0

    def check(self) -> Prompt:
        """Counts a client may be shown: integers, none past the prompt's tokens."""
        counts = (self.job_id, self.tokens, self.read, self.cached)
        if (
            not all(type(v) is int and v >= 0 for v in counts)
            or max(self.read, self.cached) > self.tokens
        ):
            raise BusProtocolError(f"PROMPT {self!r} is malformed")
        return self


@dataclass(frozen=True, slots=True)
class Bye(Message):
    TYPE = MsgType.BYE
    reason: str


@dataclass(frozen=True, slots=True)
class Welcome(Message):
    TYPE = MsgType.WELCOME
    heartbeat_interval: float
    liveness: int
    #: engine settings resolved by the front: slots, max_model_instances, memory_budget_mb
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What an engine needs to load a model: a JOB's `model` and a CONTROL load's, checked
    at the edge (parse) so that nothing inside the engine re-checks a dict."""

    id: str
    path: str
    format: str  #: "fake" | "gguf" | "transformers"
    options: dict[str, Any] = field(default_factory=dict)
    #: an instance made for embeddings (llama.cpp computes them only in such a context)
    embedding: bool = False

    @classmethod
    def parse(cls, data: object) -> ModelSpec:
        if not isinstance(data, dict):
            raise BusProtocolError(f"a model spec is {type(data).__name__}, not a map")
        fields = {"id": str, "path": str, "format": str, "options": dict}
        for name, kind in fields.items():
            if not isinstance(data.get(name), kind):
                raise BusProtocolError(f"model spec field {name!r} is not a {kind.__name__}")
        return cls(data["id"], data["path"], data["format"], data["options"])

    def key(self) -> str:
        """Two specs that differ in any option are two different models."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True, default=str)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """The settings the front gives an engine, in WELCOME and CONTROL config; checked at
    the edge (parse), so the engine never re-checks a dict. None leaves one unchanged."""

    max_model_instances: int | None = None
    memory_budget_mb: float | None = None
    #: jobs the engine runs at once: the credit the front dispatches within
    slots: int | None = None
    #: when to pause to cool: {cpu_high, cpu_resume, gpu_high, gpu_resume,
    #: gpu_overrides: {vendor: {high, resume}}} in °C
    thermal: dict[str, Any] | None = None
    #: the fleet's host RAM cap (0: none), and how long a load may wait for room
    max_ram_mb: float | None = None
    room_wait_seconds: float | None = None

    @classmethod
    def parse(cls, data: dict[str, Any]) -> EngineConfig:
        instances = data.get("max_model_instances")
        budget = data.get("memory_budget_mb")
        slots = data.get("slots")
        for name, count in (("max_model_instances", instances), ("slots", slots)):
            if count is not None and not (isinstance(count, int) and is_number(count, 1)):
                raise BusProtocolError(f"{name} {count!r} is not an int >= 1")
        ram, wait = data.get("max_ram_mb"), data.get("room_wait_seconds")
        for name, value in (("memory_budget_mb", budget), ("max_ram_mb", ram),
                            ("room_wait_seconds", wait)):  # fmt: skip
            if value is not None and not is_number(value, 0):
                raise BusProtocolError(f"{name} {value!r} is not a number >= 0")
        thermal = data.get("thermal")
        if thermal is not None:
            _check_thermal(thermal)
        return cls(instances, budget, slots, thermal, ram, wait)


def _check_thermal(thermal: object) -> None:
    def degrees(value: object) -> bool:
        return is_number(value, 0, above=True)

    if not isinstance(thermal, dict) or not all(
        degrees(thermal.get(k)) for k in ("cpu_high", "cpu_resume", "gpu_high", "gpu_resume")
    ):
        raise BusProtocolError(f"thermal {thermal!r} lacks a threshold")
    overrides = thermal.get("gpu_overrides", {})
    if not isinstance(overrides, dict) or not all(
        isinstance(v, dict) and degrees(v.get("high")) and degrees(v.get("resume"))
        for v in overrides.values()
    ):
        raise BusProtocolError(f"thermal.gpu_overrides {overrides!r} is malformed")


@dataclass(frozen=True, slots=True)
class Refuse(Message):
    TYPE = MsgType.REFUSE
    reason: str


@dataclass(frozen=True, slots=True)
class Job(Message):
    """One generation request. The model spec travels with the job so engines stay stateless."""

    TYPE = MsgType.JOB
    job_id: int
    model: dict[str, Any]  #: {"id", "path", "format", "options"}
    kind: str  #: "chat" | "completion" | "embedding"
    prompt: str = ""
    messages: list[Any] = field(default_factory=list)
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  #: 0: every token
    min_p: float = 0.0
    #: OpenAI's penalties over the completion so far: presence is subtracted from the logit
    #: of every token generated at least once, frequency once per time it was generated
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    #: token id (a decimal string, as OpenAI sends it) -> added to its logit
    logit_bias: dict[str, float] = field(default_factory=dict)
    seed: int | None = None
    #: tools the model may call, in OpenAI's function-tool shape ({"type": "function",
    #: "function": {"name", "description", "parameters"}}); chat templates take this shape
    tools: list[Any] = field(default_factory=list)
    #: "none", "auto", "required" or "function" (then tool_name is the one to call)
    tool_choice: str = "none"
    tool_name: str = ""
    parallel_tool_calls: bool = True
    #: a constraint on the whole output: {} (none), {"type": "json_object"} or
    #: {"type": "json_schema", "schema": {...}}
    response_format: dict[str, Any] = field(default_factory=dict)
    #: send each token's log-probability, with this many alternatives (0-20)
    logprobs: bool = False
    top_logprobs: int = 0
    inputs: list[str] = field(default_factory=list)  #: texts of an embedding job
    #: a completion's prompt as the model's own token ids (read as they are: no BOS is
    #: added), or the ids a detokenize job turns into text
    prompt_ids: list[int] = field(default_factory=list)
    #: an embedding job's inputs as token ids, one list per input (instead of inputs)
    input_ids: list[list[int]] = field(default_factory=list)
    #: fill-in-the-middle: the text after the gap a completion fills ("" for none)
    suffix: str = ""
    #: whether a tokenize job's messages end with the assistant's turn opened, as a chat
    #: job's prompt does
    add_generation_prompt: bool = True
    #: how hard a reasoning model thinks: "" its default, "none" not at all, else a level
    #: ("minimal", "low", "medium", "high", "xhigh", "max"), given to its chat template's
    #: switch where it has one (engine/chat_template.py); a model without one ignores it
    reasoning_effort: str = ""


@dataclass(frozen=True, slots=True)
class Cancel(Message):
    TYPE = MsgType.CANCEL
    job_id: int


@dataclass(frozen=True, slots=True)
class Hold(Message):
    TYPE = MsgType.HOLD
    job_id: int


@dataclass(frozen=True, slots=True)
class Resume(Message):
    TYPE = MsgType.RESUME
    job_id: int


@dataclass(frozen=True, slots=True)
class Control(Message):
    TYPE = MsgType.CONTROL
    ref: int
    action: str  #: a ControlAction
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Ping(Message):
    TYPE = MsgType.PING
    ref: int


#: the ref of a PING that only tells a remote engine its front is alive: no answer
KEEPALIVE = 0


RECORDS: dict[MsgType, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        Hello,
        Heartbeat,
        Chunks,
        Done,
        Fail,
        Embeddings,
        Tokens,
        Prompt,
        Bye,
        Welcome,
        Refuse,
        Job,
        Cancel,
        Hold,
        Resume,
        Control,
        Ping,
    )
}


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    accepts: tuple[type, ...]
    required: bool


def _runtime_types(hint: Any) -> tuple[type, ...]:
    """The isinstance() classes that a field's annotation admits (containers unchecked)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        out: tuple[type, ...] = ()
        for arg in typing.get_args(hint):
            out += _runtime_types(arg)
        return out
    if hint is type(None):
        return (type(None),)
    base = origin or hint
    if base is float:
        return (float, int)  # msgpack keeps 1.0 as float, but peers may send ints
    if base is int:
        return (int,)
    return (base,)


def _specs(cls: type[Message]) -> tuple[_FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(
        _FieldSpec(
            f.name,
            _runtime_types(hints[f.name]),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )


_SPECS: dict[MsgType, tuple[_FieldSpec, ...]] = {t: _specs(c) for t, c in RECORDS.items()}


def from_body(msg_type: MsgType, body: object) -> Message:
    """Build the record for a decoded body, or raise BusProtocolError naming the fault."""
    if not isinstance(body, dict):
        raise BusProtocolError(f"{msg_type.name} body is {type(body).__name__}, not a map")
    kwargs: dict[str, Any] = {}
    for spec in _SPECS[msg_type]:
        if spec.name not in body:
            if spec.required:
                raise BusProtocolError(f"{msg_type.name} lacks field {spec.name!r}")
            continue
        value = body[spec.name]
        # bool is an int subclass; a bool where a number is declared is a peer bug
        if not isinstance(value, spec.accepts) or (
            isinstance(value, bool) and bool not in spec.accepts
        ):
            raise BusProtocolError(
                f"{msg_type.name}.{spec.name} is {type(value).__name__}, "
                f"expected {'/'.join(t.__name__ for t in spec.accepts)}"
            )
        kwargs[spec.name] = value
    return RECORDS[msg_type](**kwargs)
