"""The OpenAPI 3.1 description the front serves at /admin/api/openapi.json: the admin
API (what the console calls) and the model routes. Request bodies come from the pydantic
models that validate them, so the description cannot drift from what is accepted; a test
checks that every route of the app is described and nothing else is."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from pydantic import BaseModel

import coderai
from coderai.catalogue.entries import ModelEntry
from coderai.front.api.anthropic.request import CountTokensRequest, MessagesRequest
from coderai.front.api.openai.schemas import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    TokenizeRequest,
)
from coderai.front.api.responses.request import ResponsesRequest
from coderai.front.console.accounts_api import (
    KeyLimitsBody,
    Login,
    NewKey,
    NewPassword,
    NewUser,
)
from coderai.front.console.pulls_api import PullBody
from coderai.front.http import ADMIN_PREFIX

JSON = "application/json"
EVENTS = "text/event-stream"
_REF = "#/components/schemas/{model}"


@dataclass(frozen=True)
class Op:
    method: str
    path: str
    summary: str
    body: type[BaseModel] | dict[str, Any] | None = None
    #: the success status and what it carries
    status: int = 200
    produces: str = JSON
    query: tuple[tuple[str, str], ...] = ()
    #: who may call it: the admin ("admin"), an API key ("api"), or anyone ("open")
    access: str = "admin"


_ANY_OBJECT: dict[str, Any] = {"type": "object"}
A = ADMIN_PREFIX
OPERATIONS = (
    Op("POST", A + "login", "Log in: sets the session cookie, returns the CSRF token", Login,
       access="open"),
    Op("POST", A + "logout", "End this session", status=204),
    Op("GET", A + "session", "The session's user and CSRF token"),
    Op("GET", A + "engines", "Every planned engine as the front sees it"),
    Op("POST", A + "engines/{name}/drain", "No new jobs; running ones get the grace period"),
    Op("POST", A + "engines/{name}/restart",
       "Drain, then stop and start the engine again (a remote one: ask it to rejoin)"),
    Op("POST", A + "engines/{name}/unload", "Unload a model's idle instances there",
       _ANY_OBJECT, status=202),
    Op("GET", A + "models", "The catalogue, its owners and warnings"),
    Op("PUT", A + "models", "Replace the catalogue", _ANY_OBJECT),
    Op("POST", A + "models", "Add one model", ModelEntry),
    Op("PATCH", A + "models/{id}", "Change some fields of one model", _ANY_OBJECT),
    Op("DELETE", A + "models/{id}", "Remove one model"),
    Op("POST", A + "models/{id}/load", "Its owner engine loads it now", status=202),
    Op("POST", A + "models/{id}/unload", "Every engine unloads its idle instances",
       status=202),
    Op("GET", A + "models/{id}/estimate",
       "Its memory loaded (weights, KV cache, compute) against its engine's room"),
    Op("GET", A + "pulls", "Models being fetched from the hub, and the last ones fetched"),
    Op("POST", A + "pulls", "Fetch a model from the hub, then add it", PullBody, status=202),
    Op("DELETE", A + "pulls/{id}", "Cancel a pull (at its next chunk)"),
    Op("GET", A + "scan", "The models already on this machine, proposed as entries",
       query=(("folder", "string"),)),
    Op("GET", A + "activity", "Running and recent API requests"),
    Op("GET", A + "status", "Engines, host memory, VRAM, cooldowns and the broker uplink"),
    Op("GET", A + "broker", "The AISBF broker uplink: state, session, last error, requests"),
    Op("GET", A + "events", "The console's live feed", produces=EVENTS),
    Op("GET", A + "settings", "Settings, which apply live and which at restart"),
    Op("PATCH", A + "settings", "Change settings by dotted name", _ANY_OBJECT),
    Op("GET", A + "users", "Console users"),
    Op("POST", A + "users", "Add a console user", NewUser, status=201),
    Op("PATCH", A + "users/{username}", "Set a user's password", NewPassword),
    Op("DELETE", A + "users/{username}", "Delete a user (never the last)", status=204),
    Op("GET", A + "keys", "API keys (never their secrets)"),
    Op("POST", A + "keys", "Create an API key; the secret is in this answer only", NewKey,
       status=201),
    Op("PATCH", A + "keys/{id}", "Change an API key's limits, budgets or weight",
       KeyLimitsBody),
    Op("DELETE", A + "keys/{id}", "Revoke an API key", status=204),
    Op("GET", A + "usage", "Requests and tokens per day, key and model",
       query=(("days", "integer"),)),
    Op("GET", A + "logs", "Recent log lines of the front or an engine",
       query=(("source", "string"), ("lines", "integer"))),
    Op("GET", A + "logs/stream", "Log lines as they are written", produces=EVENTS,
       query=(("source", "string"),)),
    Op("GET", A + "openapi.json", "This description", access="open"),
    Op("POST", "/v1/chat/completions", "OpenAI chat completions", ChatRequest, access="api"),
    Op("POST", "/v1/completions", "OpenAI completions", CompletionRequest, access="api"),
    Op("POST", "/v1/embeddings", "OpenAI embeddings", EmbeddingRequest, access="api"),
    Op("GET", "/v1/models", "The models this key may use", access="api"),
    Op("GET", "/v1/models/{model}", "One model", access="api"),
    Op("POST", "/v1/messages", "Anthropic messages", MessagesRequest, access="api"),
    Op("POST", "/v1/messages/count_tokens", "Anthropic token count", CountTokensRequest,
       access="api"),
    Op("POST", "/v1/responses", "OpenAI responses", ResponsesRequest, access="api"),
    Op("POST", "/v1/responses/compact", "A conversation compacted to its summary",
       ResponsesRequest, access="api"),
    Op("POST", "/tokenize", "A prompt's token ids", TokenizeRequest, access="api"),
    Op("POST", "/detokenize", "The text of token ids", DetokenizeRequest, access="api"),
    Op("GET", "/healthz", "Engines and queue; 503 while no engine serves", access="open"),
    Op("GET", "/health", "200 while a request can be served", access="open"),
    Op("GET", "/metrics", "Prometheus metrics", produces="text/plain", access="open"),
)  # fmt: skip

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


#: the admin key or a console session; an API key (optional where keys are not
#: required, hence the empty alternative); nothing
_SECURITY: dict[str, list[dict[str, list[str]]]] = {
    "admin": [{"bearer": []}, {"session": []}],
    "api": [{"bearer": []}, {"apiKey": []}, {}],
    "open": [],
}


def _operation(op: Op, schemas: dict[str, Any]) -> dict[str, Any]:
    content = {op.produces: {"schema": _ANY_OBJECT}} if op.status != 204 else None
    success: dict[str, Any] = {"description": op.summary}
    if content:
        success["content"] = content
    error = {"content": {JSON: {"schema": {"$ref": _REF.format(model="Error")}}}}
    out: dict[str, Any] = {
        "summary": op.summary,
        "security": _SECURITY[op.access],
        "responses": {
            str(op.status): success,
            "4XX": {"description": "the request's mistake", **error},
            "5XX": {"description": "no engine could serve it, or a failure of ours", **error},
        },
    }
    params = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _path_params(op.path)
    ] + [{"name": n, "in": "query", "schema": {"type": t}} for n, t in op.query]
    if params:
        out["parameters"] = params
    if isinstance(op.body, type):
        schema = op.body.model_json_schema(ref_template=_REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[op.body.__name__] = schema
        body_schema: dict[str, Any] = {"$ref": _REF.format(model=op.body.__name__)}
    else:
        body_schema = op.body or {}
    if op.body is not None:
        out["requestBody"] = {"required": True, "content": {JSON: {"schema": body_schema}}}
    return out


def _path_params(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


@functools.cache
def document() -> dict[str, Any]:
    schemas: dict[str, Any] = {"Error": _ERROR}
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, schemas)
    return {
        "openapi": "3.1.0",
        "info": {"title": "CoderAI", "version": coderai.__version__},
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": "coderai_session"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
        "paths": paths,
    }


async def serve(request: web.Request) -> web.Response:
    return web.json_response(document())
