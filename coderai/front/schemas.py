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

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from coderai.errors import InvalidRequest
from coderai.validation import first_problem

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


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


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
    #: an end-user id, for abuse monitoring at OpenAI: accepted, and used for nothing yet
    user: Text | None = None
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


class MediaPart(BaseModel):
    """A part that is not text: parsed only so that it is refused by what it is, rather
    than with a schema path the user cannot read."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["image_url", "input_audio", "file"]

    def what(self) -> str:
        return {"image_url": "an image", "input_audio": "audio", "file": "a file"}[self.type]


Part = Annotated[TextPart | RefusalPart | MediaPart, Field(discriminator="type")]


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[Part] | None = None
    # not built yet: refused unless empty (tool calls and their results)
    tool_calls: list[Any] | None = None
    tool_call_id: Text | None = None
    function_call: Any = None
    #: a participant's name; chat templates have no place for it
    name: Text | None = None

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
        for name in ("tool_calls", "tool_call_id", "function_call", "name"):
            if getattr(self, name) not in (None, []):
                raise ValueError(f"{name} is not supported by this server yet")
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(
            part.text for part in self.content if isinstance(part, TextPart | RefusalPart)
        )

    def template_role(self) -> str:
        """OpenAI's developer role is the system role of models that predate it, and chat
        templates do not know it."""
        return "system" if self.role == "developer" else self.role


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: TokenCount | None = None

    def check(self) -> None:
        super().check()
        for i, message in enumerate(self.messages):
            parts = message.content if isinstance(message.content, list) else []
            for j, part in enumerate(parts):
                if isinstance(part, MediaPart):
                    raise InvalidRequest(
                        f"messages[{i}].content[{j}] is {part.what()}; model {self.model!r}"
                        " takes text only",
                        param=f"messages[{i}].content[{j}]",
                    )

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Sampling):
    prompt: Text | list[Text]
    max_tokens: TokenCount | None = 16  # OpenAI's documented default for completions
    #: send the prompt back ahead of the completion
    echo: bool = False

    def prompt_text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise InvalidRequest("prompt must be a string or a list of one string", param="prompt")
        return self.prompt[0]

    def token_limit(self) -> int | None:
        return self.max_tokens


class EmbeddingRequest(_Body):
    model: Text = Field(min_length=1)
    input: Text | list[Text]
    encoding_format: Literal["float", "base64"] = "float"

    def check(self) -> None:
        if isinstance(self.input, list) and not self.input:
            raise InvalidRequest("input must not be empty", param="input")

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


def _absent(*idle: Any) -> Callable[[Any], bool]:
    return lambda value: any(value == v and type(value) is type(v) for v in (None, *idle))


#: OpenAI parameters not built yet, each with the values that ask nothing of the server;
#: any other value is refused with a 400 naming it, never silently ignored
NOT_BUILT: dict[str, Callable[[Any], bool]] = {
    "n": _absent(1),
    "tools": _absent([]),
    "tool_choice": _absent("none"),
    "functions": _absent([]),
    "function_call": _absent("none"),
    "response_format": _absent({"type": "text"}),
    "logprobs": _absent(False, 0),
    "top_logprobs": _absent(0),
    "suffix": _absent(""),
    "echo": _absent(False),
    "best_of": _absent(1),
    "prediction": _absent(),
    "audio": _absent(),
    "modalities": _absent(["text"]),
    "reasoning_effort": _absent("none"),
    "verbosity": _absent(),
    "web_search_options": _absent(),
    "store": _absent(False),
    "metadata": _absent({}),
    # OpenAI's processing tier: only the default asks nothing of this server
    "service_tier": _absent("auto", "default"),
}
#: on /v1/completions, logprobs is a count, and 0 still asks for the chosen tokens'; echo
#: is built there (CompletionRequest)
COMPLETIONS_NOT_BUILT = {
    **{k: v for k, v in NOT_BUILT.items() if k != "echo"},
    "logprobs": _absent(),
}


def refuse_not_built(body: dict[str, Any], table: dict[str, Callable[[Any], bool]]) -> None:
    for name, idle in table.items():
        if name in body and not idle(body[name]):
            raise InvalidRequest(f"{name} is not supported by this server yet", param=name)


EMBEDDINGS_NOT_BUILT = {"dimensions": _absent()}
_NOT_BUILT_BY_REQUEST: dict[type[BaseModel], dict[str, Callable[[Any], bool]]] = {
    ChatRequest: NOT_BUILT,
    CompletionRequest: COMPLETIONS_NOT_BUILT,
    EmbeddingRequest: EMBEDDINGS_NOT_BUILT,
}


def parse(model: type[_Sampling] | type[EmbeddingRequest], body: Any) -> Any:
    """Validate a JSON body into a request, mapping the first problem to a 400."""
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    refuse_not_built(body, _NOT_BUILT_BY_REQUEST[model])
    try:
        request = model.model_validate(body)
    except ValidationError as exc:
        loc, message = first_problem(exc)
        raise InvalidRequest(f"{'.'.join(loc)}: {message}", param=loc[0] if loc else None) from None
    request.check()
    return request
