"""Assembles the front: the aiohttp application, the dispatcher and the supervisor."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from aiohttp import web

from coderai.errors import CoderaiError
from coderai.front.admin_api import AdminRoutes, admin_auth
from coderai.front.dispatcher import Dispatcher
from coderai.front.models import ModelDirectory
from coderai.front.openai_api import ENGINE_HEADER, FRONT, OpenAIRoutes, error_response
from coderai.front.supervisor import Supervisor

log = logging.getLogger("coderai.front")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

DISPATCHER = web.AppKey("dispatcher", Dispatcher)
SUPERVISOR = web.AppKey("supervisor", Supervisor)
#: large enough for long chat histories, small enough that a body cannot exhaust memory
MAX_BODY_BYTES = 16 * 1024 * 1024


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every /v1 answer is an OpenAI envelope, whatever went wrong and wherever."""
    if not request.path.startswith("/v1/"):
        return await handler(request)
    try:
        response = await handler(request)
    except CoderaiError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        error = CoderaiError(exc.reason)
        error.status = exc.status
        error.error_type = "invalid_request_error" if exc.status < 500 else "server_error"
        return error_response(error)
    if not response.prepared and ENGINE_HEADER not in response.headers:
        response.headers[ENGINE_HEADER] = FRONT
    return response


async def healthz(request: web.Request) -> web.Response:
    dispatcher = request.app[DISPATCHER]
    engines = [e.describe() for e in dispatcher.registry.all()]
    ready = any(e["state"] != "dead" for e in engines)
    body = {
        "status": "ok" if ready else "unavailable",
        "engines": sorted(engines, key=lambda e: str(e["name"])),
        "queued": len(dispatcher.queue),
        "dropped_bus_frames": dispatcher.dropped_frames,
    }
    return web.json_response(body, status=200 if ready else 503)


def build_app(
    models: ModelDirectory,
    dispatcher: Dispatcher,
    supervisor: Supervisor | None,
    admin_key: str,
    catalogue_file: Path | None = None,
) -> web.Application:
    app = web.Application(
        middlewares=[openai_errors, admin_auth(admin_key)], client_max_size=MAX_BODY_BYTES
    )
    app[DISPATCHER] = dispatcher
    if supervisor is not None:
        app[SUPERVISOR] = supervisor
    OpenAIRoutes(dispatcher, models).add_to(app)
    AdminRoutes(dispatcher, models, supervisor, catalogue_file).add_to(app)
    app.router.add_get("/healthz", healthz)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await dispatcher.start()
        if supervisor is not None:
            supervisor.start()
        yield
        if supervisor is not None:
            await supervisor.stop()
        await dispatcher.stop()

    app.cleanup_ctx.append(lifecycle)
    return app
