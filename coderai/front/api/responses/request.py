"""OpenAI's Responses API request (POST /v1/responses, `store: false`), validated at the
edge and translated into the chat request that chat completions run: `instructions`
becomes the system message, message items messages, `function_call` items an
assistant's `tool_calls`, `function_call_output` items `tool` messages, function tools
chat's function tools and `text.format` a `response_format`.

Nothing is stored, so nothing refers back to an earlier response: `previous_response_id`,
`conversation`, `store: true` and `background` are refused with a 400 naming them, as is
every other parameter this server does not build. `prompt_cache_key`, `safety_identifier`
and `user` keep a conversation on one replica of a model that has several (the prefix
cache itself needs no key). Accepted as asking nothing:
`stream_options` (deltas are not padded), `service_tier` `auto`/`default`; `metadata`
is sent back on the response, as OpenAI does.

What coding agents send by default (Codex on every request), and how it is honoured:
- `reasoning.effort` goes to a reasoning model's chat-template switch where it has one
  (`none` turns thinking off); `reasoning.summary` asks for summaries of reasoning items:
  a local model writes none, so the thinking itself is given as its summary too (Codex
  shows a summary, not the raw text). A model that writes no reasoning yields no
  reasoning items, which satisfies both.
- `include: ["reasoning.encrypted_content"]` asks for the encrypted reasoning of the
  reasoning items: each carries a copy of its thinking there, not encrypted (nothing is
  stored or secret here: reasoning_copy.py), which is read back when it returns without
  its text. Other `include` values are refused.
- `reasoning` items sent back with the conversation: their `reasoning_text` content is
  the next assistant turn's `reasoning_content`, which the chat template places (a tool
  loop's current turn, in Qwen3's) or drops; summaries, and encrypted content not ours,
  are left out (a summary is not the thinking).
- Tools: function tools are offered to the model; a `namespace` group's function tools
  too, each named `<namespace>__<name>` to the model and answered as a `function_call`
  with the tool's `name` and its `namespace`, as the API reference defines them. A hosted
  tool the server cannot run (`web_search`, `file_search`, `code_interpreter`, …) is not
  offered: the answer names those left out in the `X-CoderAI-Tools-Omitted` header, and
  the front logs them, instead of failing the request.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from coderai.errors import InvalidRequest
from coderai.front.api.openai.schemas import Effort, Text, TokenCount
from coderai.front.api.responses.reasoning_copy import COMPACTION_PREFIX, Shown, unseal
from coderai.front.api.translation import Body, asks_nothing

#: OpenAI's rule for a function's name
_FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"


class TextPart(Body):
    """Text in an item: the user's (`input_text`) or an earlier answer's (`output_text`,
    whose annotations and logprobs describe it and ask nothing)."""

    type: Literal["input_text", "output_text"]
    text: Text


class RefusalPart(Body):
    """An earlier answer's refusal, read as its text (as in chat completions)."""

    type: Literal["refusal"]
    refusal: Text


class ImagePart(Body):
    """An image (a screenshot): what a model that reads no images gets in its place is a
    placeholder saying so (media/shown.py)."""

    type: Literal["input_image"]
    image_url: Text | None = None
    file_id: Text | None = None
    #: how finely a vision model looks at it: the projector decides, so any asks nothing
    detail: Literal["auto", "low", "high", "original"] | None = None

    @model_validator(mode="after")
    def _some_image(self) -> ImagePart:
        if not (self.image_url or self.file_id):
            raise ValueError("an input_image needs image_url or file_id")
        return self

    def for_chat(self) -> dict[str, Any]:
        if self.image_url:
            return {"type": "image_url", "image_url": {"url": self.image_url}}
        return {"type": "file", "file": {"file_id": self.file_id}}


class FilePart(Body):
    """A file (a PDF, or text): read as its text under its name (media/shown.py)."""

    type: Literal["input_file"]
    file_data: Text | None = None
    file_id: Text | None = None
    file_url: Text | None = None
    filename: Text | None = None

    def for_chat(self) -> dict[str, Any]:
        fields = self.model_dump(exclude={"type"}, exclude_none=True)
        if not fields.keys() - {"filename"}:
            raise InvalidRequest("an input_file needs file_data, file_id or file_url")
        return {"type": "file", "file": fields}


class AudioPart(Body):
    type: Literal["input_audio"]
    input_audio: dict[str, Text]

    def for_chat(self) -> dict[str, Any]:
        return {"type": "input_audio", "input_audio": self.input_audio}


Part = Annotated[
    TextPart | RefusalPart | ImagePart | FilePart | AudioPart, Field(discriminator="type")
]


def _parts(parts: str | list[Part]) -> str | list[dict[str, Any]]:
    """Content in chat's shape: a text, or parts that the chat path joins (a medium as
    what the model reads in its place)."""
    if isinstance(parts, str):
        return parts
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        elif isinstance(p, RefusalPart):
            out.append({"type": "refusal", "refusal": p.refusal})
        else:
            out.append(p.for_chat())
    return out


class MessageItem(Body):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: Text | list[Part]


class FunctionCallItem(Body):
    """A call the model made earlier, sent back with the conversation."""

    type: Literal["function_call"]
    call_id: Text = Field(min_length=1)
    name: Text = Field(min_length=1)
    arguments: Text
    namespace: Text | None = None


class FunctionCallOutputItem(Body):
    """What the client's function answered to a call."""

    type: Literal["function_call_output"]
    call_id: Text = Field(min_length=1)
    #: text, or parts: a tool that read an image or a file returns it here
    output: Text | list[Part]


class ReasoningItem(Body):
    """An earlier answer's reasoning, sent back with the conversation: its `reasoning_text`
    content (or, without it, the copy of ours in `encrypted_content`) is the next
    assistant turn's reasoning_content (the template places it or drops it); a summary is
    not the thinking, and is left out."""

    type: Literal["reasoning"]
    summary: list[Any] = Field(default_factory=list)
    content: list[Any] | None = None
    encrypted_content: Text | None = None

    def text(self) -> str:
        written = "".join(
            part["text"]
            for part in self.content or []
            if isinstance(part, dict)
            and part.get("type") == "reasoning_text"
            and isinstance(part.get("text"), str)
        )
        # a client that sends back only the copy it asked for gets the thinking back
        return written or unseal(self.encrypted_content or "")


class CompactionItem(Body):
    """A summary of the conversation before it, which an earlier compaction made (ours:
    its encrypted_content is the summary under our prefix, not encrypted). The model reads
    it as a user message; one another server made cannot be read, and is a 400."""

    type: Literal["compaction"]
    id: Text | None = None
    encrypted_content: Text

    @model_validator(mode="after")
    def _ours(self) -> CompactionItem:
        if not self.encrypted_content.startswith(COMPACTION_PREFIX):
            raise ValueError(
                "a compaction item this server did not make cannot be read here; start a new"
                " conversation, or send the history it replaced"
            )
        return self

    def summary(self) -> str:
        return unseal(self.encrypted_content, COMPACTION_PREFIX)


class CompactionTrigger(Body):
    """Codex's request to compact (its remote compaction v2): the last input item, after
    which the answer is one compaction item holding the model's summary of the rest."""

    type: Literal["compaction_trigger"]
    metadata: Any = None


Item = Annotated[
    MessageItem
    | FunctionCallItem
    | FunctionCallOutputItem
    | ReasoningItem
    | CompactionItem
    | CompactionTrigger,
    Field(discriminator="type"),
]
#: the input items this server reads
_READ = ("message", "function_call", "function_call_output", "reasoning", "compaction",
         "compaction_trigger")  # fmt: skip
#: what the model reads before a compaction's summary
SUMMARY_HEAD = "[A summary of the conversation so far, written when it was compacted]"
#: what the model is asked, after the conversation, to compact it (our own words)
SUMMARY_PROMPT = (
    "The conversation above is about to be replaced by a summary, and the work will go on"
    " from that summary alone. Write it now: what the user asked for, what has been done so"
    " far (files read and changed, commands run and what they showed), the decisions made"
    " and why, the current state, and what remains to be done next. Keep exact file paths,"
    " names, commands and error messages. Write only the summary."
)
#: a summary's tokens, unless the request sets max_output_tokens
SUMMARY_TOKENS = 4096


def _readable_items(items: object, model: object) -> None:
    """An item or part this server cannot read is refused by what it is and where, before
    pydantic would name it by a schema path. A message item may leave out its type: it is
    filled in, for the discriminator."""
    for i, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        kind = item.setdefault("type", "message") if "role" in item else item.get("type")
        if kind not in _READ:
            raise InvalidRequest(
                f"input[{i}] is a {kind!r} item; this server takes {', '.join(_READ)} items",
                param=f"input[{i}]",
            )


class FunctionTool(Body):
    type: Literal["function"]
    name: Annotated[str, Field(pattern=_FUNCTION_NAME)]
    description: Text | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def for_chat(self, namespace: str = "") -> dict[str, Any]:
        function = self.model_dump(exclude={"type"}, exclude_none=True)
        return {
            "type": "function",
            "function": {**function, "name": qualified(namespace, self.name)},
        }

    def echo(self) -> dict[str, Any]:
        """The tool as the response lists it."""
        return {**self.model_dump(), "strict": bool(self.strict)}


#: how a namespace's function is named to the model (chat templates know no namespaces)
NAMESPACE_JOIN = "__"


def qualified(namespace: str, name: str) -> str:
    return f"{namespace}{NAMESPACE_JOIN}{name}" if namespace else name


class NamespaceTool(Body):
    """Function tools grouped under a shared name (an MCP server's, say). The model sees
    each function as `<namespace>__<name>`, its description led by the namespace's."""

    type: Literal["namespace"]
    name: Annotated[str, Field(pattern=_FUNCTION_NAME)]
    description: Text | None = None
    tools: list[Inner] = Field(default_factory=list)

    def functions(self) -> list[FunctionTool]:
        return [t for t in self.tools if isinstance(t, FunctionTool)]

    def offered(self) -> list[dict[str, Any]]:
        out = []
        for function in self.functions():
            offered = function.for_chat(self.name)
            if self.description:
                own = function.description
                described = f"{self.description}: {own}" if own else self.description
                offered["function"]["description"] = described
            out.append(offered)
        return out

    def echo(self) -> dict[str, Any]:
        return {**self.model_dump(exclude={"tools"}), "tools": [t.echo() for t in self.tools]}


class HostedTool(Body):
    """A tool the API's own servers run (web search, file search, …), or any type this
    server does not know: not offered to the model, and named in the answer."""

    type: Text

    def label(self, namespace: str = "") -> str:
        return qualified(namespace, self.type)

    def echo(self) -> dict[str, Any]:
        return {"type": self.type}


def _tool_class(data: Any) -> str:
    kind = data.get("type") if isinstance(data, dict) else getattr(data, "type", None)
    return kind if kind in ("function", "namespace") else "hosted"


Tool = Annotated[
    Annotated[FunctionTool, Tag("function")]
    | Annotated[NamespaceTool, Tag("namespace")]
    | Annotated[HostedTool, Tag("hosted")],
    Discriminator(_tool_class),
]
#: what a namespace holds: functions, or hosted tools (a namespace within is hosted too)
Inner = Annotated[
    Annotated[FunctionTool, Tag("function")] | Annotated[HostedTool, Tag("hosted")],
    Discriminator(lambda data: "function" if _tool_class(data) == "function" else "hosted"),
]


class Reasoning(Body):
    """How a reasoning model thinks (see the module's note)."""

    effort: Effort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    #: the older name of summary
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


NamespaceTool.model_rebuild()


class FunctionChoice(Body):
    type: Literal["function"]
    name: Text

    @model_validator(mode="before")
    @classmethod
    def _a_function(cls, data: Any) -> Any:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind != "function":
            raise ValueError(f"a {kind!r} tool choice; this server runs function tools only")
        return data


class FormatText(Body):
    type: Literal["text"]


class FormatJsonObject(Body):
    type: Literal["json_object"]


class FormatJsonSchema(Body):
    type: Literal["json_schema"]
    name: Annotated[str, Field(pattern=_FUNCTION_NAME)]
    #: `schema` shadows a pydantic BaseModel attribute, hence the alias
    json_schema: dict[str, Any] = Field(alias="schema")
    description: Text | None = None
    strict: bool | None = None


Format = Annotated[FormatText | FormatJsonObject | FormatJsonSchema, Field(discriminator="type")]


class TextConfig(Body):
    format: Format | None = None
    verbosity: Literal["medium"] | None = None

    def echo(self) -> dict[str, Any]:
        fmt = self.format.model_dump(by_alias=True, exclude_none=True) if self.format else None
        return {"format": fmt or {"type": "text"}, "verbosity": "medium"}


#: the Responses API's parameters this server does not build, with the values that ask
#: nothing of it
NOT_BUILT = {
    "background": asks_nothing(False),
    "conversation": asks_nothing(),
    "prompt": asks_nothing(),
    "max_tool_calls": asks_nothing(),
    "top_logprobs": asks_nothing(0),
    "truncation": asks_nothing("disabled"),
    "service_tier": asks_nothing("auto", "default"),
    "store": asks_nothing(False),
}
STORED = (
    "previous_response_id needs stored responses, which this server does not keep;"
    " send the whole conversation as input, with store: false"
)


class ResponsesRequest(Body):
    model: Text = Field(min_length=1)
    input: Text | Annotated[list[Item], Field(min_length=1)]
    instructions: Text | None = None
    tools: list[Tool] = Field(default_factory=list)
    tool_choice: Literal["none", "auto", "required"] | FunctionChoice | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    max_output_tokens: TokenCount | None = None
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    stream: bool = False
    metadata: dict[str, Text] | None = Field(None, max_length=16)
    user: Text | None = None
    #: keys of the conversation and of its end user: they keep a conversation on one
    #: replica of its model (front/api/affinity.py)
    prompt_cache_key: Text | None = None
    safety_identifier: Text | None = None
    reasoning: Reasoning | None = None
    include: list[Literal["reasoning.encrypted_content"]] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _readable(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if data.get("previous_response_id") is not None:
                raise InvalidRequest(STORED, param="previous_response_id")
            _readable_items(data.get("input"), data.get("model"))
        return data

    def chat_messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.instructions:
            out.append({"role": "system", "content": self.instructions})
        if isinstance(self.input, str):
            return [*out, {"role": "user", "content": self.input}]
        thought = ""  # a reasoning item's, for the assistant turn that follows it
        for item in self.input:
            if isinstance(item, ReasoningItem):
                thought += item.text()
                continue
            if isinstance(item, CompactionTrigger):
                continue  # the request's summary is asked after the rest (chat_body)
            if isinstance(item, CompactionItem):
                out.append({"role": "user", "content": f"{SUMMARY_HEAD}\n{item.summary()}"})
            elif isinstance(item, MessageItem):
                out.append({"role": item.role, "content": _parts(item.content)})
            elif isinstance(item, FunctionCallOutputItem):
                content = _parts(item.output)
                out.append({"role": "tool", "tool_call_id": item.call_id, "content": content})
            elif isinstance(item, FunctionCallItem):
                _add_call(out, item)
            if thought and out and out[-1]["role"] == "assistant":
                out[-1]["reasoning_content"] = thought
            thought = ""
        return out

    def chat_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.chat_messages(),
            "parallel_tool_calls": self.parallel_tool_calls,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stream": self.stream,
        }
        if self.max_output_tokens is not None:
            body["max_tokens"] = self.max_output_tokens
        if self.compacting():
            # the summary is text: the tools stay known to the template (the history's
            # calls are rendered with them), and none may be called
            body["messages"].append({"role": "user", "content": SUMMARY_PROMPT})
            body.setdefault("max_tokens", SUMMARY_TOKENS)
            if self.offered():
                body["tools"], body["tool_choice"] = self.offered(), "none"
            return body
        offered = self.offered()
        if offered:
            body["tools"] = offered
        if self.reasoning is not None and self.reasoning.effort is not None:
            body["reasoning_effort"] = self.reasoning.effort
        if isinstance(self.tool_choice, FunctionChoice):
            body["tool_choice"] = {"type": "function", "function": {"name": self.tool_choice.name}}
        elif self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice
        fmt = self.text.format if self.text else None
        if isinstance(fmt, FormatJsonSchema):
            spec = fmt.model_dump(by_alias=True, exclude={"type"}, exclude_none=True)
            body["response_format"] = {"type": "json_schema", "json_schema": spec}
        elif fmt is not None:
            body["response_format"] = {"type": fmt.type}
        return body

    def compacting(self) -> bool:
        """Whether the request asks for a compaction (its last item is the trigger)."""
        return not isinstance(self.input, str) and isinstance(self.input[-1], CompactionTrigger)

    @model_validator(mode="after")
    def _trigger_last(self) -> ResponsesRequest:
        items = [] if isinstance(self.input, str) else self.input
        for i, item in enumerate(items[:-1]):
            if isinstance(item, CompactionTrigger):
                raise InvalidRequest(
                    f"input[{i}]: a compaction_trigger must be the last item", param=f"input[{i}]"
                )
        return self

    def offered(self) -> list[dict[str, Any]]:
        """The tools the model is offered, in chat's shape: functions, a namespace's
        functions among them."""
        out: list[dict[str, Any]] = []
        for tool in self.tools:
            if isinstance(tool, FunctionTool):
                out.append(tool.for_chat())
            elif isinstance(tool, NamespaceTool):
                out += tool.offered()
        return out

    @model_validator(mode="after")
    def _names_the_model_can_tell_apart(self) -> ResponsesRequest:
        """A namespaced function's name, as the model sees it, must be a function name
        (64 characters at most) and no other tool's: checked here, where the client's own
        tool can be named."""
        seen: set[str] = set()
        for i, tool in enumerate(self.tools):
            inner = tool.functions() if isinstance(tool, NamespaceTool) else [tool]
            for j, function in enumerate(inner):
                if not isinstance(function, FunctionTool):
                    continue
                space = tool.name if isinstance(tool, NamespaceTool) else ""
                name = qualified(space, function.name)
                where = f"tools[{i}].tools[{j}].name" if space else f"tools[{i}].name"
                if len(name) > 64:
                    raise InvalidRequest(
                        f"{where}: {name!r} (namespace and name) is over 64 characters",
                        param=where,
                    )
                if name in seen:
                    raise InvalidRequest(f"{where}: a second tool named {name!r}", param=where)
                seen.add(name)
        return self

    def omitted(self) -> list[str]:
        """The tools not offered (hosted ones), by type, a namespace's as `<ns>__<type>`."""
        out: list[str] = []
        for tool in self.tools:
            if isinstance(tool, HostedTool):
                out.append(tool.label())
            elif isinstance(tool, NamespaceTool):
                out += [t.label(tool.name) for t in tool.tools if isinstance(t, HostedTool)]
        return out

    def namespaces(self) -> dict[str, tuple[str, str]]:
        """The model's name of each namespaced function: (namespace, name)."""
        return {
            qualified(tool.name, f.name): (tool.name, f.name)
            for tool in self.tools
            if isinstance(tool, NamespaceTool)
            for f in tool.functions()
        }

    def shown(self) -> Shown:
        """What reasoning items carry besides their text (reply.reasoning_item)."""
        summary = self.reasoning is not None and bool(
            self.reasoning.summary or self.reasoning.generate_summary
        )
        return Shown(summary=summary, copy="reasoning.encrypted_content" in self.include)

    def reasoning_echo(self) -> dict[str, Any] | None:
        if self.reasoning is None:
            return None
        summary = self.reasoning.summary or self.reasoning.generate_summary
        return {"effort": self.reasoning.effort, "summary": summary}

    def tool_choice_echo(self) -> str | dict[str, Any]:
        if isinstance(self.tool_choice, FunctionChoice):
            return self.tool_choice.model_dump()
        return self.tool_choice or "auto"


def _add_call(messages: list[dict[str, Any]], item: FunctionCallItem) -> None:
    """A call joins the assistant message before it (its text, or the calls it made in
    the same turn), as one chat message carries a turn's text and calls."""
    call = {
        "id": item.call_id,
        "type": "function",
        "function": {
            "name": qualified(item.namespace or "", item.name),
            "arguments": item.arguments,
        },
    }
    if not messages or messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": None})
    messages[-1].setdefault("tool_calls", []).append(call)


#: chat completions' names in the checks of a translated body, and the Responses API's
RENAMES = [(".function.parameters", ".parameters"), ("response_format", "text.format")]
