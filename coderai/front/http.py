"""The one HTTP error boundary of the front: every route's failure becomes an OpenAI-style
envelope with the right status, and the headers its error class carries.

Handlers raise `CoderaiError`s; the middleware here renders them. A client's mistake (a
4xx) is answered without a traceback in the log; only a failure of ours is logged with
one, and even then the client gets an envelope, never aiohttp's text/plain 500.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import BaseModel, ValidationError

from coderai.common.validation import first_problem
from coderai.errors import CoderaiError, InvalidRequest, UnreadableBody

log = logging.getLogger("coderai.front")

#: where the admin API lives (the console's routes)
ADMIN_PREFIX = "/admin/api/"
ENGINE_HEADER = "X-CoderAI-Engine"
#: the value of ENGINE_HEADER on responses the front answers without an engine
FRONT = "front"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: where a request keeps its notices: headers its checks set, for whatever answers it
_NOTICES = "coderai.notices"
#: a notice's longest value: a header, not a report
_NOTICE_CHARS = 2000


def notify(request: web.Request, notices: Mapping[str, str]) -> None:
    """Headers to add to the request's answer, whole or streamed (add_notices)."""
    request.setdefault(_NOTICES, {}).update(notices)


async def add_notices(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp's on_response_prepare hook: the request's notices, as printable ASCII (a
    value may quote a client's text)."""
    for name, value in request.get(_NOTICES, {}).items():
        printable = "".join(c if " " <= c <= "~" else "?" for c in value)
        response.headers[name] = printable[:_NOTICE_CHARS]


def error_response(
    error: CoderaiError, engine: str | None = None, body: dict[str, Any] | None = None
) -> web.Response:
    """The error's status and headers, with its OpenAI envelope or another API's `body`."""
    headers = {ENGINE_HEADER: engine or FRONT, **error.headers()}
    envelope = error.envelope() if body is None else body
    response = web.json_response(envelope, status=error.status, headers=headers)
    if error.close_connection:
        response.force_close()
    return response


async def read_json(request: web.Request) -> Any:
    """The request body as JSON, or InvalidRequest saying what is wrong with it."""
    try:
        raw = await request.read()
    except (web.RequestPayloadError, HttpProcessingError) as exc:
        # e.g. a body labelled Content-Encoding: gzip that is not gzip
        reason = " ".join(str(exc.__cause__ or exc).split())
        raise UnreadableBody(f"the request body cannot be read: {reason}") from None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidRequest("the request body is nested too deeply") from None


M = TypeVar("M", bound=BaseModel)


async def read_body(request: web.Request, model: type[M]) -> M:
    """The request body validated into `model` (see `validate`)."""
    return validate(model, await read_json(request))


#: a parameter the server does not build yet, and what of it asks nothing (absent, null,
#: a default): such a value is honoured by doing nothing, any other is refused
NotBuilt = Mapping[str, Callable[[Any], bool]]


def validate(model: type[M], data: Any, not_built: NotBuilt | None = None, *,
             top_param: bool = False) -> M:  # fmt: skip
    """`data` validated into `model`, or InvalidRequest naming what is wrong: a body that
    is not a JSON object, a parameter not built here with a value that asks something,
    or the first problem pydantic finds. The one path every body takes. The APIs name
    the top-level parameter in `param` (`top_param`), as OpenAI does; the admin API the
    whole path."""
    if not isinstance(data, dict):
        raise InvalidRequest("the request body must be a JSON object")
    for name, idle in (not_built or {}).items():
        if name in data and not idle(data[name]):
            raise InvalidRequest(f"{name} is not supported by this server yet", param=name)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        where, message = first_problem(exc)
        path = ".".join(where)
        if top_param:
            raise InvalidRequest(f"{path}: {message}", param=where[0] if where else None) from None
        raise InvalidRequest(f"{path or 'body'}: {message}", param=path or None) from None


def from_http_exception(exc: web.HTTPException) -> CoderaiError:
    error = CoderaiError(exc.reason)
    error.status = exc.status
    error.error_type = "invalid_request_error" if exc.status < 500 else "server_error"
    return error


class MalformedRequestLog(logging.Filter):
    """aiohttp logs a request it cannot parse (a NUL in a header, a broken request line) as
    an ERROR with a traceback, though the fault is the client's and it has answered 400.
    Such a record becomes one INFO line naming the fault: a client must not be able to
    fill the log with tracebacks (found by schemathesis)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg = "a malformed request from %s was answered 400: %s"
            record.args = (peer, exc.message)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


#: one instance, so that installing it again (a second server in one process) is a no-op
MALFORMED_REQUEST_LOG = MalformedRequestLog()


def error_boundary(on_answer: Callable[[web.Request, web.StreamResponse], None]) -> Any:
    """The middleware; `on_answer` sees every response (metrics count them)."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except CoderaiError as exc:
            response = error_response(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = error_response(from_http_exception(exc))
            # what the exception says beside its body stays: a 405's Allow (RFC 9110
            # requires it; found by schemathesis), a 413's or a 416's headers
            for name, value in exc.headers.items():
                if name.lower() not in ("content-type", "content-length"):
                    response.headers[name] = value
            if exc.status == 413:
                # the body was not read to its end (a gzip bomb's stops at the limit): the
                # connection cannot carry another request, and the client must be told so
                # rather than have its next request on it reset
                response.force_close()
        except HttpProcessingError as exc:
            response = error_response(UnreadableBody(f"bad request: {exc.message}"))
        except Exception:
            log.exception("error handling %s %s", request.method, request.path)
            response = error_response(CoderaiError("internal error; see the server log"))
        if not response.prepared and ENGINE_HEADER not in response.headers:
            response.headers[ENGINE_HEADER] = FRONT
        on_answer(request, response)
        return response

    return errors
