"""Every message that crosses the bus, declared in one place.

A message is a frozen record; its msgpack body is the dict of its fields. Decoding checks
each field's type against the record's declaration (checker.py) so that a malformed body is
rejected at the edge (invariant 4) rather than deep inside a handler. Unknown keys are
ignored, which lets a newer peer add optional fields without a version bump. The kinds its
fields name are in kinds.py.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

from coderai.bus.checker import check_thermal, is_number, record
from coderai.bus.kinds import MsgType
from coderai.errors import BusProtocolError


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
    #: what its backends decided about the machine: {"extra_buffer_types": {"machine":
    #: {on, why, signal, kept, cpu, off_for}, "models": {id: {on, why}}}, "attention":
    #: {"models": {id: {on, why}}}} (llama.cpp's trial of its CPU kernels, and each
    #: model's flash attention; checked by the front with kernels_of)
    kernels: dict[str, Any] = field(default_factory=dict)
    #: per model id, the affinities (JOB.affinity) of the conversations it holds the
    #: prefix of or runs, most recent first (engine/holdings.py); a model that keeps no
    #: prefix is absent. `holds_cut`: the models it held more conversations of than it
    #: names. `taken`: the job id of the last JOB it had taken when it told (0: none
    #: yet), so that the front knows which of its jobs the report counts (all three
    #: checked by the front with holds_of)
    holds: dict[str, Any] = field(default_factory=dict)
    holds_cut: list[Any] = field(default_factory=list)
    taken: int = 0


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
    #: completion tokens a reasoning model spent thinking (decoding/reasoning.py)
    reasoning_tokens: int = 0


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
    #: never unloaded to make room (the catalogue's keep_loaded); not part of its key: the
    #: same model, kept or not
    keep_loaded: bool = False

    @classmethod
    def parse(cls, data: object) -> ModelSpec:
        if not isinstance(data, dict):
            raise BusProtocolError(f"a model spec is {type(data).__name__}, not a map")
        fields = {"id": str, "path": str, "format": str, "options": dict}
        for name, kind in fields.items():
            if not isinstance(data.get(name), kind):
                raise BusProtocolError(f"model spec field {name!r} is not a {kind.__name__}")
        kept = data.get("keep_loaded", False)
        if not isinstance(kept, bool):
            raise BusProtocolError("model spec field 'keep_loaded' is not a bool")
        return cls(data["id"], data["path"], data["format"], data["options"], keep_loaded=kept)

    def key(self) -> str:
        """Two specs that differ in any option are two different models."""
        fields = dataclasses.asdict(self)
        del fields["keep_loaded"]
        return json.dumps(fields, sort_keys=True, default=str)


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
            check_thermal(thermal)
        return cls(instances, budget, slots, thermal, ram, wait)


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
    #: the reasoning tokens after which a reasoning model's thinking is ended by forcing
    #: its end marker (-1: no budget; engine/decoding/structured.py)
    thinking_budget: int = -1
    #: variables for the chat template (chat_template_kwargs), over the reasoning switch's
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    #: a chat job's images, each one's bytes, for a model with a vision projector: the
    #: messages' text holds kinds.IMAGE_MARKER where each goes, in this order
    images: list[bytes] = field(default_factory=list)
    #: the conversation it belongs to, for a model on several engines ("" for none:
    #: front/api/affinity.py); the engine names those it holds in its heartbeat (holds)
    affinity: str = ""


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


def from_body(msg_type: MsgType, body: object) -> Message:
    """Build the record for a decoded body, or raise BusProtocolError naming the fault."""
    return record(RECORDS[msg_type], body)
