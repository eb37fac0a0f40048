"""What the APIs that translate at the edge share: their bodies are validated like chat
completions' (strict types, a 400 naming the first problem, their own parameters honoured
or refused, never ignored), then translated into an OpenAI chat body and validated as a
`ChatRequest`, so that one set of rules (schemas that must compile, named tools that must
exist) holds for all three wire formats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from coderai.catalogue.entries import ModelEntry
from coderai.errors import InvalidRequest
from coderai.front import http
from coderai.front.api.openai.routes import job_fields
from coderai.front.api.openai.schemas import ChatRequest, parse
from coderai.front.api.serving import Serving
from coderai.front.dispatch.jobs import FrontJob


class Body(BaseModel):
    """A request body or a part of one: strict types; keys the API does not define are
    ignored, as OpenAI-compatible servers commonly do."""

    model_config = ConfigDict(extra="ignore", strict=True)


def asks_nothing(*idle: object) -> Callable[[object], bool]:
    """Whether a parameter's value asks nothing of the server: absent, null or one of
    these (of the same type: `false` is not `0`)."""
    return lambda value: any(value == v and type(value) is type(v) for v in (None, *idle))


Model = TypeVar("Model", bound=BaseModel)


def validate(model: type[Model], body: Any, not_built: dict[str, Callable[[Any], bool]]) -> Model:
    """A translated API's body as `model`, checked as every API body is (http.validate)."""
    return http.validate(model, body, not_built, top_param=True)


def chat_request(body: dict[str, Any], renames: list[tuple[str, str]]) -> ChatRequest:
    """The translated body as a chat request. Its checks name chat completions'
    parameters; `renames` ((chat's name, this API's name) pairs) puts the client's own
    names in their place."""
    try:
        req: ChatRequest = parse(ChatRequest, body)
    except InvalidRequest as exc:
        message, param = exc.message, exc.param or ""
        for ours, theirs in renames:
            message, param = message.replace(ours, theirs), param.replace(ours, theirs)
        raise InvalidRequest(message, param=param or None) from None
    return req


def submit_chat(serving: Serving, req: ChatRequest, entry: ModelEntry) -> FrontJob:
    """One choice of a validated chat request, its output taken as pieces. The Messages
    and Responses APIs translate their bodies into a ChatRequest and run this: three wire
    formats, one internal job."""
    messages = [m.for_template() for m in req.messages]
    return serving.submit_chat(entry, messages, job_fields(req))
