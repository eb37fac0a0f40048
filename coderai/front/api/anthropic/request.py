"""Anthropic's Messages API request (POST /v1/messages and its count_tokens), validated at
the edge and translated into the chat request that chat completions run: the system
prompt and text blocks become OpenAI-shape messages, `tool_use` blocks an assistant's
`tool_calls`, `tool_result` blocks `tool` messages, tools function tools and
`tool_choice` OpenAI's.

Anthropic's own parameters are honoured or refused with a 400 naming them; keys it does
not define are ignored. Accepted as asking nothing of this server: `cache_control`
anywhere (the engines' prefix cache keeps every prompt's prefix anyway),
`user_profile_id` and `workspace_id` (one tenant here; `metadata.user_id` keeps a
conversation on one replica of a model that has several),
`service_tier`, `eager_input_streaming` (a tool's arguments stream in increments anyway).
A `tool_result` marked `is_error` reaches the model with its content prefixed "Error: "
(chat templates have no place for the flag).

What coding agents send by default (Claude Code on every request), and how it is honoured:
- `thinking`: `disabled` turns a reasoning model's thinking off where its chat template
  has a switch; `enabled` and `adaptive` leave it on, and `enabled`'s `budget_tokens` ends
  the thinking after that many tokens by forcing its end marker (Job.thinking_budget). A
  model that does not reason satisfies all three by writing no thinking blocks.
- `output_config.effort` goes to the template's reasoning switch (Job.reasoning_effort),
  where the model has one; a model without one is asked nothing by it.
- `context_management` edits that clear thinking blocks: the thinking blocks a request
  holds are given to the model's template as its turns' `reasoning_content`, and chat
  templates place only the current turn's (a tool loop's) or none, so any `keep` holds.
- `thinking` blocks in earlier assistant turns are that turn's `reasoning_content` (the
  template places it, as the model wrote it, or drops it); `redacted_thinking` blocks
  carry nothing readable and are accepted and left out.
- A `system` message inside `messages` (Claude Code sends its environment block so) joins
  the user turn before it, or the next one, as text: chat templates take one system
  prompt, first; its place in the conversation is kept, so the prompt's prefix is too.
- A system block that is Claude Code's `x-anthropic-billing-header` (a nonce that changes
  on every request) is dropped before the prompt is built: it tells the model nothing,
  and kept it would make every prompt differ from its first tokens, defeating the prefix
  cache.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from coderai.errors import InvalidRequest
from coderai.front.api.anthropic import server_tools
from coderai.front.api.openai.schemas import Text, TokenCount
from coderai.front.api.translation import Body, asks_nothing

#: Anthropic's rule for a tool's name
_TOOL_NAME = r"^[a-zA-Z0-9_-]{1,64}$"
#: stop sequences one request may give (Anthropic sets no small limit; each is checked
#: against the text at every token)
MAX_STOP_SEQUENCES = 32


class CacheControl(Body):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class TextBlock(Body):
    type: Literal["text"]
    text: Text
    cache_control: CacheControl | None = None
    #: an earlier answer's citations: this server reads no documents to cite
    citations: list[Any] | None = None

    @model_validator(mode="after")
    def _no_citations(self) -> TextBlock:
        if self.citations:
            raise ValueError("citations are not supported by this server")
        return self


class ToolUseBlock(Body):
    type: Literal["tool_use"]
    id: Text = Field(min_length=1)
    name: Text = Field(min_length=1)
    input: dict[str, Any]
    cache_control: CacheControl | None = None


class Base64Source(Body):
    type: Literal["base64"]
    media_type: Text
    data: Text


class UrlSource(Body):
    type: Literal["url"]
    url: Text


class FileSource(Body):
    """A file in Anthropic's Files API: none is kept here, so it becomes a placeholder."""

    type: Literal["file"]
    file_id: Text


class PlainTextSource(Body):
    type: Literal["text"]
    media_type: Literal["text/plain"] = "text/plain"
    data: Text


class ImageBlock(Body):
    """An image (a screenshot a user pasted, or one a tool read): what a model that
    reads no images gets in its place is a placeholder saying so (media/shown.py)."""

    type: Literal["image"]
    source: Annotated[Base64Source | UrlSource | FileSource, Field(discriminator="type")]
    cache_control: CacheControl | None = None

    def part(self) -> dict[str, Any]:
        src = self.source
        if isinstance(src, FileSource):
            return {"type": "file", "file": {"file_id": src.file_id}}
        url = src.url if isinstance(src, UrlSource) else f"data:{src.media_type};base64,{src.data}"
        return {"type": "image_url", "image_url": {"url": url}}


class ContentSource(Body):
    """A document given as content blocks: their text (and images) in its place."""

    type: Literal["content"]
    content: Text | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]]


class Citations(Body):
    enabled: bool = False


class DocumentBlock(Body):
    """A document (a PDF, or text): read as its text under its title (media/shown.py)."""

    type: Literal["document"]
    source: Annotated[
        Base64Source | PlainTextSource | UrlSource | FileSource | ContentSource,
        Field(discriminator="type"),
    ]
    title: Text | None = None
    context: Text | None = None
    #: cited answers are not built: the model reads the text, and answers without them
    citations: Citations | None = None
    cache_control: CacheControl | None = None

    @model_validator(mode="after")
    def _no_citations(self) -> DocumentBlock:
        if self.citations is not None and self.citations.enabled:
            raise ValueError("citations are not supported by this server")
        return self

    def parts(self) -> list[dict[str, Any]]:
        src, title = self.source, self.title or ""
        head = f"[document: {title}]\n" if title else ""
        if self.context:
            head += f"[context: {self.context}]\n"
        named = head or "[document]\n"  # a document's text is set apart from what follows
        if isinstance(src, PlainTextSource):
            return [{"type": "text", "text": f"{named}{src.data}\n[end of document]\n"}]
        if isinstance(src, ContentSource):
            inner = src.content
            blocks = [{"type": "text", "text": inner}] if isinstance(inner, str) else [
                b.part() if isinstance(b, ImageBlock) else {"type": "text", "text": b.text}
                for b in inner
            ]  # fmt: skip
            end = {"type": "text", "text": "\n[end of document]\n"}
            return [{"type": "text", "text": named}, *blocks, end]
        if isinstance(src, FileSource):
            ref: dict[str, Any] = {"file_id": src.file_id}
        elif isinstance(src, UrlSource):
            ref = {"file_url": src.url}
        else:
            ref = {"file_data": f"data:{src.media_type};base64,{src.data}"}
        file = {"type": "file", "file": {**ref, **({"filename": title} if title else {})}}
        return [{"type": "text", "text": head}, file] if self.context else [file]


class SearchResultBlock(Body):
    """A search result a tool returned (Anthropic's RAG block): its text under its title
    and source. Cited answers are not built."""

    type: Literal["search_result"]
    source: Text
    title: Text
    content: list[TextBlock]
    citations: Citations | None = None
    cache_control: CacheControl | None = None

    def part(self) -> dict[str, Any]:
        text = join(self.content)
        return {"type": "text", "text": f"[search result: {self.title} ({self.source})]\n{text}\n"}


#: what a tool result, or a user turn, may hold besides text
Media = ImageBlock | DocumentBlock | SearchResultBlock


def media_parts(block: Media) -> list[dict[str, Any]]:
    return block.parts() if isinstance(block, DocumentBlock) else [block.part()]


class ToolResultBlock(Body):
    type: Literal["tool_result"]
    tool_use_id: Text = Field(min_length=1)
    content: (
        Text
        | list[
            Annotated[
                TextBlock | ImageBlock | DocumentBlock | SearchResultBlock,
                Field(discriminator="type"),
            ]
        ]
    ) = ""
    is_error: bool = False
    cache_control: CacheControl | None = None

    def content_for_chat(self) -> str | list[dict[str, Any]]:
        """The result as a tool message's content: its text, or parts where it holds media
        (a screenshot Claude Code's Read returned)."""
        prefix = "Error: " if self.is_error else ""
        if isinstance(self.content, str):
            return prefix + self.content
        if all(isinstance(b, TextBlock) for b in self.content):
            return prefix + "".join(b.text for b in self.content if isinstance(b, TextBlock))
        parts: list[dict[str, Any]] = [{"type": "text", "text": prefix}] if prefix else []
        for b in self.content:
            parts += _parts([b]) if isinstance(b, TextBlock) else media_parts(b)
        return parts


class ServerToolUseBlock(Body):
    """An earlier answer's call of a server tool (server_tools.py): an assistant's call."""

    type: Literal["server_tool_use"]
    id: Text = Field(min_length=1)
    name: Literal["web_search", "web_fetch"]
    input: dict[str, Any]
    cache_control: CacheControl | None = None


class ServerToolResultBlock(Body):
    """What a server tool gave that call: its tool message, as the model reads it."""

    type: Literal["web_search_tool_result", "web_fetch_tool_result"]
    tool_use_id: Text = Field(min_length=1)
    content: Any
    cache_control: CacheControl | None = None

    def text(self) -> str:
        kind = "web_search" if self.type == "web_search_tool_result" else "web_fetch"
        return server_tools.what_the_model_reads(kind, self.content)


class ThinkingBlock(Body):
    """An earlier answer's thinking, sent back with the conversation: its turn's
    reasoning_content (see the module's note)."""

    type: Literal["thinking", "redacted_thinking"]
    thinking: Text = ""
    signature: Text = ""
    data: Text = ""
    cache_control: CacheControl | None = None


Block = Annotated[
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | ImageBlock
    | DocumentBlock
    | SearchResultBlock
    | ServerToolUseBlock
    | ServerToolResultBlock,
    Field(discriminator="type"),
]
#: the blocks this server reads
_READ = ("text", "tool_use", "tool_result", "thinking", "redacted_thinking", "image",
         "document", "search_result", "server_tool_use", "web_search_tool_result",
         "web_fetch_tool_result")  # fmt: skip


def join(blocks: list[TextBlock]) -> str:
    """Text blocks as one text: as the chat path joins a message's text parts."""
    return "".join(block.text for block in blocks)


def _refuse_blocks(messages: object, model: object) -> None:
    """A block this server cannot read is refused by what it is and where, before pydantic
    would name it by a schema path."""
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            _refuse_block(block, f"messages[{i}].content[{j}]", model)
            # a server tool's results are its own blocks (server_tools.py reads them)
            if isinstance(block, dict) and block.get("type") in server_tools.RESULT_TYPES.values():
                continue
            inner = block.get("content") if isinstance(block, dict) else None
            for k, part in enumerate(inner if isinstance(inner, list) else []):
                _refuse_block(part, f"messages[{i}].content[{j}].content[{k}]", model)


def _refuse_block(block: object, where: str, model: object) -> None:
    kind = block.get("type") if isinstance(block, dict) else None
    if not isinstance(kind, str):
        raise InvalidRequest(f"{where} is not a block with a type", param=where)
    if kind not in _READ:
        raise InvalidRequest(
            f"{where} is a {kind!r} block; this server takes {', '.join(_READ)} blocks",
            param=where,
        )


class Message(Body):
    role: Literal["user", "assistant", "system"]
    content: Text | list[Block]

    @model_validator(mode="after")
    def _blocks_of_its_role(self) -> Message:
        blocks = self.content if isinstance(self.content, list) else []
        if self.role != "assistant" and any(
            isinstance(b, ToolUseBlock | ThinkingBlock | ServerToolUseBlock | ServerToolResultBlock)
            for b in blocks
        ):
            raise ValueError(
                "tool_use, thinking and server tool blocks belong in assistant messages"
            )
        if self.role != "user" and any(isinstance(b, ToolResultBlock | Media) for b in blocks):
            raise ValueError(
                "tool_result, image, document and search_result blocks belong in user messages"
            )
        return self

    def text(self) -> str:
        """A system message's text: its text blocks joined."""
        if isinstance(self.content, str):
            return self.content
        return join([b for b in self.content if isinstance(b, TextBlock)])

    def for_chat(self) -> list[dict[str, Any]]:
        """The OpenAI-shape messages of this one."""
        if isinstance(self.content, str):
            return [{"role": self.role, "content": self.content}]
        if self.role == "assistant":
            return self._assistant()
        return self._user()

    def _assistant(self) -> list[dict[str, Any]]:
        """The turn's text, thinking and calls; a server tool's result splits it: the
        calls before it, its tool message, then the rest of the turn."""
        out: list[dict[str, Any]] = []
        blocks: list[Any] = []
        for block in self.content:
            if isinstance(block, ServerToolResultBlock):
                if blocks or not out:  # a result right after a result answers the same turn
                    out.append(_assistant_message(blocks))
                out.append({"role": "tool", "tool_call_id": block.tool_use_id,
                            "content": block.text()})  # fmt: skip
                blocks = []
            else:
                blocks.append(block)
        if blocks or not out:
            out.append(_assistant_message(blocks))
        return out

    def _user(self) -> list[dict[str, Any]]:
        """Each tool result is a tool message (answering its call); the text between them,
        a user message, in the order given."""
        out: list[dict[str, Any]] = []
        texts: list[dict[str, Any]] = []  # the parts of the user message being gathered
        for block in self.content:
            if isinstance(block, TextBlock):
                texts += _parts([block])
            elif isinstance(block, ImageBlock | DocumentBlock | SearchResultBlock):
                texts += media_parts(block)
            elif isinstance(block, ToolResultBlock):
                if texts:
                    out.append({"role": "user", "content": texts})
                    texts = []
                content = block.content_for_chat()
                out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        if texts or not out:
            out.append({"role": "user", "content": texts})
        return out


def _assistant_message(blocks: list[Any]) -> dict[str, Any]:
    texts = [b for b in blocks if isinstance(b, TextBlock)]
    out: dict[str, Any] = {"role": "assistant", "content": _parts(texts) or None}
    calls = [
        {"id": b.id, "type": "function",
         "function": {"name": b.name, "arguments": json.dumps(b.input, ensure_ascii=False)}}
        for b in blocks if isinstance(b, ToolUseBlock | ServerToolUseBlock)
    ]  # fmt: skip
    if calls:
        out["tool_calls"] = calls
    thought = "".join(
        b.thinking for b in blocks if isinstance(b, ThinkingBlock) and b.type == "thinking"
    )
    if thought:
        out["reasoning_content"] = thought
    return out


def _parts(blocks: list[TextBlock]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": b.text} for b in blocks]


#: how Claude Code's per-request billing block begins (module note)
BILLING_HEADER = "x-anthropic-billing-header:"


def system_prompt(system: str | list[TextBlock] | None) -> str | list[dict[str, Any]]:
    """The system prompt the model reads: without a billing header, whether it came as
    a block of its own (as Claude Code sends it) or as a string's first line."""
    if isinstance(system, str):
        first, _, rest = system.partition("\n")
        return rest if first.lstrip().startswith(BILLING_HEADER) else system
    return _parts([b for b in system or [] if not b.text.lstrip().startswith(BILLING_HEADER)])


def with_system_turns(messages: list[Message]) -> list[dict[str, Any]]:
    """The conversation in chat's shape, each system message's text joined to the user
    turn before it (or, with none before it, the next one) as a text part."""
    out: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []  # system text for the next user turn
    for message in messages:
        if message.role == "system":
            part = {"type": "text", "text": message.text()}
            if out and out[-1]["role"] == "user":
                out[-1]["content"] = [*_as_parts(out[-1]["content"]), part]
            else:
                waiting.append(part)
            continue
        turns = message.for_chat()
        if waiting and turns[0]["role"] == "user":
            turns[0]["content"] = [*waiting, *_as_parts(turns[0]["content"])]
            waiting = []
        out.extend(turns)
    if waiting:
        out.append({"role": "user", "content": waiting})
    return out


def _as_parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


class Tool(Body):
    name: Annotated[str, Field(pattern=_TOOL_NAME)]
    description: Text | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    #: Anthropic's structured tool use: arguments that follow the schema, which the
    #: grammar enforces for every call anyway
    strict: bool | None = None
    cache_control: CacheControl | None = None
    eager_input_streaming: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _client_tool(cls, data: Any) -> Any:
        kind = data.get("type") if isinstance(data, dict) else None
        if kind not in (None, "custom"):
            raise ValueError(
                f"{kind!r} is one of Anthropic's server tools that this server does not run;"
                " it takes client tools (with a name and an input_schema), web_search and"
                " web_fetch"
            )
        return data

    def for_chat(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name, "parameters": self.input_schema}
        if self.description is not None:
            function["description"] = self.description
        if self.strict is not None:
            function["strict"] = self.strict
        return {"type": "function", "function": function}


class ServerTool(Body):
    """Anthropic's web search or web fetch (server_tools.py): its uses and domains bound
    what the backend runs, web_fetch's `max_content_tokens` the text of a page (at four
    characters a token; with no backend, every call is answered as unavailable, and they
    ask nothing). `user_location` asks nothing of a search engine that has no notion of
    it; cited answers are not built (`citations.enabled` is a 400)."""

    type: Annotated[str, Field(pattern=r"^web_(search|fetch)_\d{8}$")]
    name: Literal["web_search", "web_fetch"]
    max_uses: int | None = Field(None, ge=1)
    allowed_domains: list[Text] | None = None
    blocked_domains: list[Text] | None = None
    user_location: dict[str, Any] | None = None
    #: web_fetch's: cited answers, and how much of a page to read
    citations: dict[str, Any] | None = None
    max_content_tokens: int | None = Field(None, ge=1)
    cache_control: CacheControl | None = None

    @model_validator(mode="after")
    def _name_of_its_type(self) -> ServerTool:
        if server_tools.kind_of(self.type) != self.name:
            raise ValueError(f"a {self.type} tool is named {server_tools.kind_of(self.type)!r}")
        if (self.citations or {}).get("enabled"):
            raise ValueError("cited answers (citations.enabled) are not supported by this server")
        return self

    def for_chat(self) -> dict[str, Any]:
        return server_tools.function(self.name)


def _tool_class(data: Any) -> str:
    kind = data.get("type") if isinstance(data, dict) else getattr(data, "type", None)
    return "server" if isinstance(kind, str) and server_tools.kind_of(kind) else "client"


AnyTool = Annotated[
    Annotated[Tool, Tag("client")] | Annotated[ServerTool, Tag("server")],
    Discriminator(_tool_class),
]


class ToolChoice(Body):
    type: Literal["auto", "any", "tool", "none"]
    name: Text | None = None
    disable_parallel_tool_use: bool = False

    @model_validator(mode="after")
    def _named_when_tool(self) -> ToolChoice:
        if (self.type == "tool") != (self.name is not None):
            raise ValueError("name is given with type tool, and only then")
        return self

    def for_chat(self) -> str | dict[str, Any]:
        if self.type == "tool":
            return {"type": "function", "function": {"name": self.name}}
        return {"auto": "auto", "any": "required", "none": "none"}[self.type]


class JsonFormat(Body):
    type: Literal["json_schema"]
    #: `schema` shadows a pydantic BaseModel attribute, hence the alias
    json_schema: dict[str, Any] = Field(alias="schema")


class OutputConfig(Body):
    format: JsonFormat | None = None
    #: how hard the model works: given to a reasoning model's template switch
    effort: Literal["low", "medium", "high", "max"] | None = None


class Thinking(Body):
    """Extended thinking, as the module's note says it is honoured."""

    type: Literal["enabled", "disabled", "adaptive"]
    #: at least 1,024 and under max_tokens, as Anthropic checks it
    budget_tokens: int | None = Field(None, ge=1024)
    #: how thinking is shown (summarised or omitted): this server shows what the model wrote
    display: Text | None = None

    @model_validator(mode="after")
    def _budget_when_enabled(self) -> Thinking:
        if (self.type == "enabled") != (self.budget_tokens is not None):
            raise ValueError("budget_tokens is given with type enabled, and only then")
        return self


class ContextEdit(Body):
    """One of context_management's edits. Clearing thinking blocks is all this server is
    asked: they never reach the model here, whatever is kept."""

    type: Annotated[str, Field(pattern=r"^clear_thinking_\d+$")]
    keep: Any = None


class ContextManagement(Body):
    edits: list[ContextEdit] = Field(default_factory=list)


class Metadata(Body):
    user_id: Text | None = None


#: Anthropic's parameters this server does not build, with the values that ask nothing
NOT_BUILT = {
    "container": asks_nothing(),
    "mcp_servers": asks_nothing([]),
    "inference_geo": asks_nothing(),
    "speed": asks_nothing("standard"),
    "diagnostics": asks_nothing(),
}


class CountTokensRequest(Body):
    """What decides a prompt's tokens: the body of /v1/messages/count_tokens."""

    model: Text = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: Text | list[TextBlock] | None = None
    tools: list[AnyTool] | None = None
    tool_choice: ToolChoice | None = None
    output_config: OutputConfig | None = None
    cache_control: CacheControl | None = None
    thinking: Thinking | None = None
    context_management: ContextManagement | None = None

    @model_validator(mode="before")
    @classmethod
    def _readable_blocks(cls, data: Any) -> Any:
        if isinstance(data, dict):
            _refuse_blocks(data.get("messages"), data.get("model"))
        return data

    @model_validator(mode="after")
    def _no_prefill(self) -> CountTokensRequest:
        # Anthropic continues a final assistant message; chat templates close the turn
        # and open a new one, so the answer would not continue it. A paused turn sent
        # back (it ends with a server tool's result) is no prefill: the model's next turn
        # follows the tool's message, as the API goes on from it.
        last = self.messages[-1]
        paused = isinstance(last.content, list) and isinstance(
            last.content[-1] if last.content else None, ServerToolResultBlock
        )
        if last.role == "assistant" and not paused:
            raise InvalidRequest(
                "a final assistant message (a prefill to continue) is not supported by this"
                " server; end with a user message",
                param="messages",
            )
        return self

    def chat_messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        system = system_prompt(self.system)
        if system:
            out.append({"role": "system", "content": system})
        return out + with_system_turns(self.messages)

    def server_tool_names(self) -> frozenset[str]:
        """The server tools offered, by the name the model calls them by."""
        return frozenset(t.name for t in self.tools or [] if isinstance(t, ServerTool))

    def server_uses(self) -> dict[str, int]:
        """The server tool calls the turn has made so far: those of the assistant messages
        after the last user message (a paused turn sent back), which max_uses counts."""
        uses: dict[str, int] = {}
        for message in reversed(self.messages):
            if message.role == "user":
                break
            for block in message.content if isinstance(message.content, list) else []:
                if isinstance(block, ServerToolUseBlock):
                    uses[block.name] = uses.get(block.name, 0) + 1
        return uses

    def server_limits(self) -> dict[str, server_tools.Limits]:
        """What each server tool offered allows (its uses, its domains)."""
        return {
            t.name: server_tools.Limits(
                t.max_uses,
                t.allowed_domains,
                t.blocked_domains,
                4 * t.max_content_tokens if t.max_content_tokens else None,
            )
            for t in self.tools or []
            if isinstance(t, ServerTool)
        }

    def reasoning_effort(self) -> str | None:
        """What the request asks of a reasoning model's switch: off when thinking is
        disabled, else the effort it names (None: the model's default)."""
        if self.thinking is not None and self.thinking.type == "disabled":
            return "none"
        return self.output_config.effort if self.output_config else None

    def chat_body(self) -> dict[str, Any]:
        """The request as a chat completions body (stop sequences aside: see stops)."""
        body: dict[str, Any] = {"model": self.model, "messages": self.chat_messages()}
        if self.tools:
            body["tools"] = [tool.for_chat() for tool in self.tools]
        if self.tool_choice is not None:
            body["tool_choice"] = self.tool_choice.for_chat()
            body["parallel_tool_calls"] = not self.tool_choice.disable_parallel_tool_use
        effort = self.reasoning_effort()
        if effort is not None:
            body["reasoning_effort"] = effort
        if self.thinking is not None and self.thinking.budget_tokens is not None:
            body["thinking_token_budget"] = self.thinking.budget_tokens
        fmt = self.output_config.format if self.output_config else None
        if fmt is not None:
            schema = {"name": "output", "schema": fmt.json_schema, "strict": True}
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        return body


class MessagesRequest(CountTokensRequest):
    max_tokens: TokenCount
    stop_sequences: list[Text] = Field([], max_length=MAX_STOP_SEQUENCES)
    temperature: float = Field(1.0, ge=0, le=1)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, le=2**31 - 1)
    stream: bool = False
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None

    @model_validator(mode="after")
    def _budget_under_max_tokens(self) -> MessagesRequest:
        budget = self.thinking.budget_tokens if self.thinking else None
        if budget is not None and budget >= self.max_tokens:
            raise InvalidRequest(
                "thinking.budget_tokens must be less than max_tokens", param="thinking"
            )
        return self

    def chat_body(self) -> dict[str, Any]:
        return {
            **super().chat_body(),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "stream": self.stream,
        }


#: chat completions' names in the checks of a translated body, and Anthropic's
RENAMES = [(".function.parameters", ".input_schema"), ("response_format", "output_config.format")]
