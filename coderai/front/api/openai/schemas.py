"""OpenAI request bodies, validated at the edge. Fields no OpenAI API defines are accepted
and ignored, as OpenAI-compatible servers commonly do, so clients that send extra options
keep working. OpenAI's own parameters are honoured or refused: one this server does not
build yet (NOT_BUILT) is a 400 naming it unless its value asks nothing, and a value we
cannot honour is a 400 too.

Types are strict: `"stream": "yes"` or `"max_tokens": true` is a 400, never coerced. Every
value must also cross the bus: integers within msgpack's 64 bits, and text that UTF-8 can
encode (JSON's `"\ud800"` escape decodes to a lone surrogate, which it cannot).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from base64 import b64encode
from collections.abc import Callable
from functools import lru_cache, partial
from typing import Annotated, Any, Literal, TypeGuard

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from coderai.bus.kinds import IMAGE_MARKER
from coderai.common import grammar
from coderai.config import MediaConfig
from coderai.errors import InvalidRequest
from coderai.front.http import validate
from coderai.front.media.medium import Medium
from coderai.front.media.shown import seen, show
from coderai.front.media.source import is_data_url
from coderai.front.web.image import NotFetched, fetch_image

log = logging.getLogger("coderai.front")

#: a logit_bias key: a token id in ASCII digits (str.isdigit would take "²" and "٣")
_TOKEN_ID = re.compile(r"[0-9]{1,10}")
#: the largest max_tokens accepted: far beyond any context, and within every int type
MAX_TOKENS_LIMIT = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"contains a lone surrogate ({text[exc.start]!r} at offset {exc.start});"
            " text must be valid Unicode"
        ) from None
    return text


#: text that can be sent to an engine
Text = Annotated[str, AfterValidator(_encodable)]
TokenCount = Annotated[int, Field(ge=1, le=MAX_TOKENS_LIMIT)]


def _token_id(token: int) -> int:
    if not 0 <= token <= MAX_TOKENS_LIMIT:
        raise ValueError(f"{token} is not a token id (0 to {MAX_TOKENS_LIMIT})")
    return token


#: a model's own token ids, as vLLM and llama.cpp's server read a prompt or an input (the
#: engine checks them against the model's vocabulary)
TokenIds = list[Annotated[int, AfterValidator(_token_id)]]


def is_token_ids(value: object) -> TypeGuard[list[int]]:
    """Whether a prompt or input is one list of token ids (not a list of several)."""
    return isinstance(value, list) and bool(value) and all(type(t) is int for t in value)


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    def check(self) -> None:
        """What the fields' own types cannot say, checked after them."""


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    model: Text = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: TokenCount | None = None
    stop: Text | list[Text] | None = None
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    #: not OpenAI's, but llama.cpp's and vLLM's: keep the k likeliest tokens (0: all), and
    #: those at least min_p times as likely as the likeliest
    top_k: int = Field(0, ge=0, le=MAX_TOKENS_LIMIT)
    min_p: float = Field(0.0, ge=0, le=1)
    presence_penalty: float = Field(0.0, ge=-2, le=2)
    frequency_penalty: float = Field(0.0, ge=-2, le=2)
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    #: an end-user id (for abuse monitoring at OpenAI), and a conversation's key for its
    #: prompt cache: here both keep a conversation on one replica (front/api/affinity.py)
    user: Text | None = None
    prompt_cache_key: Text | None = None
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
        for key in bias or {}:
            if not _TOKEN_ID.fullmatch(key):
                raise ValueError(f"keys are token ids, and {key[:40]!r} is not one")
        return bias

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, stop: Text | list[Text] | None) -> str | list[str] | None:
        if isinstance(stop, list) and len(stop) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        return stop

    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def check(self) -> None:
        if self.stream_options is not None and not self.stream:
            raise InvalidRequest(
                "stream_options is only allowed when stream is true", param="stream_options"
            )


class TextPart(_Body):
    type: Literal["text"]
    text: Text


class RefusalPart(_Body):
    """An assistant's earlier refusal, sent back in a conversation: its text."""

    type: Literal["refusal"]
    refusal: Text

    @property
    def text(self) -> str:
        return self.refusal


_PART_TYPES = ("text", "refusal", "image_url", "input_audio", "file")


class ImageUrl(_Body):
    #: a `data:` URL (base64) or a remote one
    url: Text
    #: how finely a vision model looks at it: the projector decides here, so any asks nothing
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Body):
    type: Literal["image_url"]
    image_url: ImageUrl
    #: its bytes, where the model reads images (ChatRequest.read_media): the prompt then
    #: holds IMAGE_MARKER in its place, and the job carries the bytes
    _seen: bytes | None = PrivateAttr(None)
    #: what the model reads in its place instead of show()'s, where read_media decided it
    _note: str | None = PrivateAttr(None)

    def medium(self) -> Medium:
        return Medium("image", url=self.image_url.url)


class InputAudio(_Body):
    data: Text
    format: Text


class AudioPart(_Body):
    type: Literal["input_audio"]
    input_audio: InputAudio

    def medium(self) -> Medium:
        return Medium("audio", data=self.input_audio.data, mime=self.input_audio.format)


class FileRef(_Body):
    #: the file's bytes: a `data:` URL, or bare base64
    file_data: Text | None = None
    file_id: Text | None = None
    filename: Text | None = None
    #: not chat's own, but the Responses API's (and Anthropic's document URL): where it is
    file_url: Text | None = None

    @model_validator(mode="after")
    def _some_content(self) -> FileRef:
        if not (self.file_data or self.file_id or self.file_url):
            raise ValueError("a file needs file_data, file_id or file_url")
        return self


class FilePart(_Body):
    type: Literal["file"]
    file: FileRef

    def medium(self) -> Medium:
        f = self.file
        data = f.file_data or ""
        url, data = (data, "") if is_data_url(data) else (f.file_url or "", data)
        return Medium("file", url=url, data=data, name=f.filename or "", file_id=f.file_id or "")


MediaPart = ImagePart | AudioPart | FilePart
Part = Annotated[TextPart | RefusalPart | ImagePart | AudioPart | FilePart,
                 Field(discriminator="type")]  # fmt: skip


class FunctionCall(_Body):
    name: Text
    #: the arguments' JSON, as the model wrote it
    arguments: Text


class ToolCall(_Body):
    id: Text
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[Part] | None = None
    #: an assistant's calls, and, in a tool message, the call it answers
    tool_calls: list[ToolCall] | None = None
    tool_call_id: Text | None = None
    # the deprecated functions API: refused unless empty
    function_call: Any = None
    #: a participant's name; chat templates have no place for it
    name: Text | None = None
    #: an earlier answer's thinking, under either name clients send it back with
    #: (DeepSeek's, OpenRouter's): given to the template, which places it or drops it
    reasoning_content: Text | None = None
    reasoning: Text | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_parts(cls, data: Any) -> Any:
        """A part of an unknown type is named as such, not as a schema path."""
        content = data.get("content") if isinstance(data, dict) else None
        for j, part in enumerate(content if isinstance(content, list) else []):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in _PART_TYPES:
                raise ValueError(
                    f"content[{j}] has type {kind!r}; a part is one of {', '.join(_PART_TYPES)}"
                )
        return data

    @model_validator(mode="after")
    def _nothing_dropped(self) -> ChatMessage:
        for name in ("function_call", "name"):
            if getattr(self, name) not in (None, []):
                raise ValueError(f"{name} is not supported by this server yet")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message has tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        # as OpenAI: a message's content is required; an assistant's (its calls, or an
        # empty turn clients send back as null) asks nothing when absent, and is read as ""
        if self.content is None and self.role != "assistant":
            raise ValueError(f"a {self.role} message needs content")
        if self.thought() and self.role != "assistant":
            raise ValueError("only an assistant message has reasoning_content")
        return self

    def thought(self) -> str:
        return self.reasoning_content or self.reasoning or ""

    def for_template(self) -> dict[str, Any]:
        """The message as the engine's template step takes it (OpenAI's shape)."""
        out: dict[str, Any] = {"role": self.template_role(), "content": self.text()}
        if self.tool_calls:
            out["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.thought():
            out["reasoning_content"] = self.thought()
        return out

    def text(self) -> str:
        """The message's text: its parts in order, each medium as what the model reads in
        its place (media/shown.py), on lines of its own."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return unmarked(self.content)
        out = ""
        for part in self.content:
            if isinstance(part, TextPart | RefusalPart):
                out += unmarked(part.text)  # only the server places images
                continue
            if out and not out.endswith("\n"):
                out += "\n"
            if isinstance(part, ImagePart) and part._seen is not None:
                out += IMAGE_MARKER + "\n"
            elif isinstance(part, ImagePart) and part._note is not None:
                out += part._note + "\n"
            else:
                out += show(part.medium()).text + "\n"
        return out

    def media(self) -> list[MediaPart]:
        if not isinstance(self.content, list):
            return []
        return [p for p in self.content if isinstance(p, ImagePart | AudioPart | FilePart)]

    def template_role(self) -> str:
        """OpenAI's developer role is the system role of models that predate it, and chat
        templates do not know it."""
        return "system" if self.role == "developer" else self.role


#: OpenAI's rule for a function's name
_FUNCTION_NAME = r"^[a-zA-Z0-9_-]{1,64}$"


class FunctionDef(_Body):
    name: Annotated[str, Field(pattern=_FUNCTION_NAME)]
    description: Text | None = None
    #: a JSON schema of the arguments (absent: no arguments)
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Body):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Body):
    name: Text


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(_Body):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)
    name: Annotated[str, Field(pattern=_FUNCTION_NAME)]
    description: Text | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs a json_schema object")
        return self

    def for_job(self) -> dict[str, Any]:
        """The engine's form: {} for text, else the type and (a json_schema's) schema."""
        if self.type == "text":
            return {}
        if self.type == "json_object":
            return {"type": "json_object"}
        assert self.json_schema is not None
        schema = self.json_schema.json_schema or {"type": "object"}
        return {"type": "json_schema", "schema": schema, "strict": bool(self.json_schema.strict)}


#: the template variables and rendering arguments the server itself sets, which
#: chat_template_kwargs may not (the backends' renderers take them as arguments too)
TEMPLATE_RESERVED = frozenset({
    "messages", "tools", "add_generation_prompt", "bos_token", "eos_token",
    "raise_exception", "strftime_now", "tool_choice", "functions", "function_call",
    "tokenize", "conversation", "chat_template", "continue_final_message", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs", "documents", "padding",
    "truncation", "max_length", "return_tensors",
})  # fmt: skip
#: how deep a template variable's value may nest
_DEEPEST = 32


def _crosses_the_bus(value: Any) -> bool:
    """Whether a JSON value nests at most _DEEPEST deep and every integer in it fits
    msgpack's 64 bits (walked without recursion: a deep value is refused, not a crash)."""
    pending = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if depth > _DEEPEST:
            return False
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and not INT64_MIN <= item <= 2**64 - 1:
            return False
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        pending.extend((child, depth + 1) for child in children)
    return True


def template_variables(given: dict[str, Any] | None) -> dict[str, Any] | None:
    """chat_template_kwargs, checked: none the server sets itself, names a template can
    read, values that cross the bus."""
    for key, value in (given or {}).items():
        if key in TEMPLATE_RESERVED or not key.isidentifier():
            raise ValueError(f"{key[:40]!r} cannot be given to the template")
        if not _crosses_the_bus(value):
            raise ValueError(
                f"{key[:40]!r}: nested past {_DEEPEST} levels, or an integer past 64 bits"
            )
    return given


#: reasoning efforts the APIs name (OpenAI's, and Anthropic's "max"), from none to most
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]

#: names, per tool, the schema keywords the grammar engine skipped (grammar.TOOL): the
#: arguments may break those parts, and the client is the one to check them
UNENFORCED_HEADER = "X-CoderAI-Schema-Unenforced"

#: names each image, audio clip or file the model read as text in its place (a document's
#: text, or a placeholder saying what was there: media/shown.py)
MEDIA_HEADER = "X-CoderAI-Media-Replaced"

#: choices one request may ask for, and engine jobs (prompts times n) one completions
#: request may start
MAX_CHOICES = 16
MAX_JOBS = 64


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: TokenCount | None = None
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=20)
    #: given to the chat template's reasoning switch, where the model's template has one;
    #: a model that does not reason is asked nothing by it
    reasoning_effort: Effort | None = None
    #: vLLM's name: a reasoning model's thinking ends after this many tokens (its end
    #: marker is forced); a model that does not reason is asked nothing by it
    thinking_token_budget: int | None = Field(None, ge=0, le=2**31 - 1)
    #: variables for the model's chat template (vLLM's, SGLang's and llama.cpp's name):
    #: `{"enable_thinking": false}` for Qwen3's switch, or any the template reads; one it
    #: does not read asks nothing of it. They win over what reasoning_effort sets.
    chat_template_kwargs: dict[str, Any] | None = None
    #: what the checks found to tell the client, as response headers (name: value)
    _notices: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def notices(self) -> dict[str, str]:
        return self._notices

    async def read_media(self, vision: bool = False, media: MediaConfig | None = None) -> None:
        """What the model reads in each medium's place, found off the event loop (a PDF's
        text takes a while the first time; it is cached after: media/shown.py), and the
        header that names them. A model with a vision projector (`vision`) reads an image
        whose bytes the request holds, or (where `media.fetch_urls` allows) that the
        front fetched from its URL: the part keeps them (`images`). A path that skips
        this step finds the same text when the prompt is built, on the loop."""
        parts = [part for message in self.messages for part in message.media()]
        if not parts:
            return
        fetched: dict[int, bytes | str] = {}  # by part: its bytes, or why there are none
        if vision:
            for i, part in enumerate(parts):
                url = part.image_url.url if isinstance(part, ImagePart) else ""
                if url and not is_data_url(url):
                    fetched[i] = await _by_url(url, media or MediaConfig())

        def read() -> list[str]:
            out = []
            for i, part in enumerate(parts):
                got = fetched.get(i)
                if isinstance(got, str) and isinstance(part, ImagePart):
                    part._note = f"[image: {_quoted(part.image_url.url)}, not shown: {got}]"
                    out.append(f"image {_quoted(part.image_url.url)} (not fetched)")
                    continue
                medium = part.medium()
                if isinstance(got, bytes):  # fetched: read as if the request held it
                    medium = Medium("image", data=b64encode(got).decode())
                image = seen(medium) if vision and isinstance(part, ImagePart) else None
                if image is not None and isinstance(part, ImagePart):
                    part._seen = image.raw
                    out.append(image.what)
                else:
                    out.append(show(part.medium()).what)
            return out

        self._notices[MEDIA_HEADER] = "; ".join(await asyncio.to_thread(read))

    def images(self) -> list[bytes]:
        """The images the model reads, in the order their markers stand in the prompt."""
        return [
            part._seen
            for message in self.messages
            for part in message.media()
            if isinstance(part, ImagePart) and part._seen is not None
        ]

    @field_validator("chat_template_kwargs")
    @classmethod
    def _template_variables(cls, given: dict[str, Any] | None) -> dict[str, Any] | None:
        return template_variables(given)

    def check(self) -> None:
        super().check()
        check_structured(self)

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def choice(self) -> tuple[str, str]:
        """(tool_choice, tool name) as the engine takes them: OpenAI's default is "auto"
        when tools are given."""
        if not self.tools:
            return "none", ""
        if isinstance(self.tool_choice, NamedToolChoice):
            return "function", self.tool_choice.function.name
        return self.tool_choice or "auto", ""

    def tool_fields(self) -> dict[str, Any]:
        choice, name = self.choice()
        return {
            "tools": [tool.model_dump(exclude_none=True) for tool in self.tools or []],
            "tool_choice": choice,
            "tool_name": name,
            "parallel_tool_calls": self.parallel_tool_calls,
            "response_format": self.response_format.for_job() if self.response_format else {},
        }


def unmarked(text: str) -> str:
    """The text without the image marker, however it was nested to survive one pass."""
    while IMAGE_MARKER in text:
        text = text.replace(IMAGE_MARKER, "")
    return text


def _quoted(url: str) -> str:
    return url if len(url) <= 200 else url[:199] + "…"


async def _by_url(url: str, media: MediaConfig) -> bytes | str:
    """An image's bytes fetched from its URL, or why they are not (the placeholder's)."""
    if not media.fetch_urls:
        return "images by URL are not fetched here (the config's media.fetch_urls is off)"
    try:
        return await fetch_image(media, url)
    except NotFetched as exc:
        return f"it could not be fetched ({exc})"


def check_structured(req: ChatRequest) -> None:
    """Tools and response formats the engines can honour: every schema must compile (the
    grammar engine names what it does not implement), a named tool must exist, and the
    two kinds of constraint are not combined."""
    choice, name = req.choice()
    # "auto" over no tools asks nothing (Codex's compaction turn sends it with tools: [])
    if req.tool_choice not in (None, "none", "auto") and not req.tools:
        raise InvalidRequest(
            "tool_choice is only allowed when tools are given", param="tool_choice"
        )
    names = [tool.function.name for tool in req.tools or []]
    if choice == "function" and name not in names:
        raise InvalidRequest(
            f"tool_choice names {name!r}, which is not among the tools", param="tool_choice"
        )
    if choice != "none":
        specs = [tool.model_dump(exclude_none=True) for tool in req.tools or []]
        unenforced = _tools_compile(json.dumps(specs, sort_keys=True))
        if unenforced:
            req.notices[UNENFORCED_HEADER] = unenforced
    fmt = req.response_format.for_job() if req.response_format else {}
    if fmt:
        if choice != "none":
            raise InvalidRequest(
                "response_format cannot be combined with tools unless tool_choice is none",
                param="response_format",
            )
        _format_compiles(json.dumps(fmt, sort_keys=True))
    if req.top_logprobs and not req.logprobs:
        raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs")


# Agents send the same tools with every request, and compiling 15 of them took 17 ms of
# the event loop here: a set of tools, or a format, that compiled once is not compiled
# again (a refused one is: an exception is not cached), and what a set leaves unenforced
# is logged once, when it is first compiled.
@lru_cache(maxsize=256)
def _tools_compile(tools_json: str) -> str:
    """What of the tools' schemas the grammar engine skips ("" if nothing), as the
    X-CoderAI-Schema-Unenforced header names it: `tools[i] name: keyword, ...` per tool."""
    specs = json.loads(tools_json)
    skipped = []
    for i, spec in enumerate(specs):
        param = f"tools[{i}].function.parameters"
        keys = _compiles(partial(grammar.named_grammar, spec), param)
        if keys:
            skipped.append(f"tools[{i}] {spec['function']['name']}: {', '.join(keys)}")
    # the grammars the engine builds nest every tool's schema in a call: compile those too,
    # so that what passes here cannot fail there
    _compiles(partial(grammar.required_grammar, specs, True), "tools")
    _compiles(partial(grammar.lazy_grammar, specs, "mistral"), "tools")
    if skipped:
        log.info("tool schemas enforced in part (the rest is the client's to check): %s",
                 "; ".join(skipped))  # fmt: skip
    return "; ".join(skipped)


@lru_cache(maxsize=256)
def _format_compiles(format_json: str) -> None:
    fmt = json.loads(format_json)
    _compiles(partial(grammar.response_grammar, fmt), "response_format")


def _compiles(build: Callable[[], str], param: str) -> list[str]:
    """The keywords a grammar skipped, or InvalidRequest where it cannot be built."""
    try:
        return grammar.check(build())
    except grammar.GrammarError as exc:
        raise InvalidRequest(
            f"{param}: this schema cannot be enforced: {exc}", param=param
        ) from None
    except (TypeError, AttributeError, KeyError):  # a shape no schema has ("$defs": null)
        raise InvalidRequest(f"{param}: this is not a JSON schema", param=param) from None


class CompletionRequest(_Sampling):
    prompt: Text | list[Text] | TokenIds | list[TokenIds]
    #: fill-in-the-middle: the text after the gap the completion fills ("" asks nothing)
    suffix: Text | None = None
    max_tokens: TokenCount | None = 16  # OpenAI's documented default for completions
    #: send the prompt back ahead of the completion
    echo: bool = False
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    #: the chosen token's and this many likeliest tokens' log-probabilities (OpenAI: 0-5)
    logprobs: int | None = Field(None, ge=0, le=5)

    def check(self) -> None:
        super().check()
        prompts = self.prompts()
        if len(prompts) * self.n > MAX_JOBS:
            raise InvalidRequest(
                f"{len(prompts)} prompts with n={self.n} ask for more than {MAX_JOBS} choices",
                param="prompt",
            )
        if self.echo and self.logprobs is not None:
            # OpenAI then scores the prompt's tokens too, which the engines do not compute
            raise InvalidRequest(
                "logprobs with echo (the prompt's log-probabilities) is not supported",
                param="logprobs",
            )
        for prompt in prompts:
            if not prompt and not isinstance(prompt, str):
                raise InvalidRequest(
                    "prompt must not be an empty list of token ids", param="prompt"
                )
            if self.suffix and self.echo:
                # which text would come back, the prompt or the prompt around the middle?
                raise InvalidRequest("echo cannot be combined with suffix", param="echo")
            if isinstance(prompt, list) and self.suffix:
                raise InvalidRequest("suffix needs a text prompt, not token ids", param="suffix")
            if isinstance(prompt, list) and self.echo:
                raise InvalidRequest("echo needs a text prompt, not token ids", param="echo")

    def prompts(self) -> list[str | list[int]]:
        """The prompts: a text or token ids, alone or in a list of several (each is its own
        choice, or n of them, in order)."""
        prompt = self.prompt
        if isinstance(prompt, str) or is_token_ids(prompt):
            return [prompt]
        if not prompt:
            raise InvalidRequest("prompt must not be an empty list", param="prompt")
        return [p for p in prompt if not isinstance(p, int)]

    def token_limit(self) -> int | None:
        return self.max_tokens


class EmbeddingRequest(_Body):
    model: Text = Field(min_length=1)
    #: a text, texts, one input's token ids, or several inputs' (LangChain sends these)
    input: Text | list[Text] | TokenIds | list[TokenIds]
    encoding_format: Literal["float", "base64"] = "float"

    def check(self) -> None:
        if isinstance(self.input, list) and not self.input:
            raise InvalidRequest("input must not be empty", param="input")
        for i, item in enumerate(self.input if isinstance(self.input, list) else []):
            if item == []:
                raise InvalidRequest(f"input[{i}] is an empty list of token ids", param="input")

    def texts(self) -> list[str]:
        """The inputs that are texts ([] when they are token ids)."""
        if isinstance(self.input, str):
            return [self.input]
        return [item for item in self.input if isinstance(item, str)]

    def token_ids(self) -> list[list[int]]:
        """The inputs that are token-id lists ([] when they are texts)."""
        if isinstance(self.input, str):
            return []
        if is_token_ids(self.input):
            return [self.input]
        return [item for item in self.input if isinstance(item, list)]


def _absent(*idle: Any) -> Callable[[Any], bool]:
    return lambda value: any(value == v and type(value) is type(v) for v in (None, *idle))


#: OpenAI parameters not built yet, each with the values that ask nothing of the server;
#: any other value is refused with a 400 naming it, never silently ignored
NOT_BUILT: dict[str, Callable[[Any], bool]] = {
    # the deprecated functions API (tools replace it)
    "functions": _absent([]),
    "function_call": _absent("none"),
    "suffix": _absent(""),
    "echo": _absent(False),
    "best_of": _absent(1),
    "prediction": _absent(),
    "audio": _absent(),
    "modalities": _absent(["text"]),
    "verbosity": _absent(),
    "web_search_options": _absent(),
    "store": _absent(False),
    "metadata": _absent({}),
    # OpenAI's processing tier: only the default asks nothing of this server
    "service_tier": _absent("auto", "default"),
}
#: echo and suffix are built on /v1/completions (CompletionRequest); chat's tools and
#: constraints are not (vLLM takes response_format there: sent, it must not be ignored)
COMPLETIONS_NOT_BUILT = {
    **{k: v for k, v in NOT_BUILT.items() if k not in ("echo", "suffix")},
    "tools": _absent([]),
    "tool_choice": _absent("none"),
    "response_format": _absent({"type": "text"}),
    "top_logprobs": _absent(0),
}


class TokenizeRequest(_Body):
    """vLLM's and llama.cpp's /tokenize: a prompt, or messages through the chat template;
    the ids are those a completion or chat request with the same text reads."""

    model: Text = Field(min_length=1)
    prompt: Text | None = None
    messages: list[ChatMessage] | None = Field(None, min_length=1)
    #: whether the messages end with the assistant's turn opened, as a chat request's do
    add_generation_prompt: bool = True
    #: the template's variables, as a chat request gives them (ChatRequest's)
    chat_template_kwargs: dict[str, Any] | None = None

    @field_validator("chat_template_kwargs")
    @classmethod
    def _template_variables(cls, given: dict[str, Any] | None) -> dict[str, Any] | None:
        return template_variables(given)

    def check(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise InvalidRequest("give either prompt or messages", param="prompt")


class DetokenizeRequest(_Body):
    """vLLM's and llama.cpp's /detokenize: the text of token ids."""

    model: Text = Field(min_length=1)
    tokens: TokenIds


EMBEDDINGS_NOT_BUILT = {"dimensions": _absent()}
#: vLLM's /tokenize options that would change the ids, which this server does not take
TOKENIZE_NOT_BUILT = {"tools": _absent([]), "chat_template": _absent()}
_NOT_BUILT_BY_REQUEST: dict[type[BaseModel], dict[str, Callable[[Any], bool]]] = {
    ChatRequest: NOT_BUILT,
    CompletionRequest: COMPLETIONS_NOT_BUILT,
    EmbeddingRequest: EMBEDDINGS_NOT_BUILT,
    TokenizeRequest: TOKENIZE_NOT_BUILT,
    DetokenizeRequest: {},
}


def parse(model: type[_Body], body: Any) -> Any:
    """Validate a JSON body into a request (http.validate), then its own checks: a 400
    naming the first problem."""
    request = validate(model, body, _NOT_BUILT_BY_REQUEST[model], top_param=True)
    request.check()
    return request
