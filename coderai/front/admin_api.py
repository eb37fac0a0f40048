"""/admin/api: engines and models as the front sees them (auth.py admits the caller)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from coderai.bus.messages import ControlAction
from coderai.config import Catalogue, catalogue_from, write_json_atomically
from coderai.errors import ConfigError, InvalidRequest, NotFound
from coderai.front.http import read_json
from coderai.front.probe import probe, refusals

if TYPE_CHECKING:
    from coderai.front.app import Front

log = logging.getLogger("coderai.front")

PREFIX = "/admin/api/"


class AdminRoutes:
    def __init__(self, front: Front) -> None:
        self.dispatcher = front.dispatcher
        self.directory = front.directory
        self.host = front.dispatcher.host
        self.views = front.engines
        self.catalogue_file = front.files.catalogue
        self.drain_grace = front.config.server.drain_grace_seconds
        self._saving = asyncio.Lock()

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(PREFIX + "engines", self.engines)
        app.router.add_post(PREFIX + "engines/{name}/drain", self.drain)
        app.router.add_post(PREFIX + "engines/{name}/unload", self.unload)
        app.router.add_post(PREFIX + "engines/{name}/restart", self.restart)
        app.router.add_get(PREFIX + "models", self.models)
        app.router.add_put(PREFIX + "models", self.save_models)

    def _engine_name(self, request: web.Request) -> str:
        name = request.match_info["name"]
        if name not in {p.name for p in self.directory.plans}:
            raise NotFound(f"no engine named {name!r}")
        return name

    async def unload(self, request: web.Request) -> web.Response:
        """Ask an engine to unload a model's idle instances (busy ones finish first)."""
        name = self._engine_name(request)
        body = await read_json(request)
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(model, str):
            raise InvalidRequest('send {"model": "<model id>"}', param="model")
        entry = self.directory.entry(model)
        record = self.dispatcher.registry.by_name(name)
        if record is None:
            raise NotFound(f"engine {name} is not on the bus")
        self.dispatcher.control(record, ControlAction.UNLOAD, {"model": entry.id})
        return web.json_response({"engine": name, "model": entry.id, "state": "unloading"},
                                 status=202)  # fmt: skip

    async def drain(self, request: web.Request) -> web.Response:
        """No new jobs for the engine; running ones get the grace period, then an error."""
        name = self._engine_name(request)
        cancelled = await self.dispatcher.drain(name, self.drain_grace)
        log.info("engine %s drained (%d requests cancelled)", name, cancelled)
        return web.json_response({"engine": name, "state": "draining", "cancelled": cancelled})

    async def restart(self, request: web.Request) -> web.Response:
        """Drain, then stop and start the engine again while the others serve."""
        name = self._engine_name(request)
        if not self.host.restartable:
            raise InvalidRequest("this server does not supervise engine processes")
        cancelled = await self.dispatcher.drain(name, self.drain_grace)
        await self.host.restart(name)
        log.info("engine %s restarted (%d requests cancelled)", name, cancelled)
        return web.json_response({"engine": name, "state": "restarting", "cancelled": cancelled})

    async def engines(self, request: web.Request) -> web.Response:
        return web.json_response({"engines": [v.public() for v in self.views()]})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(self._models_body())

    def _models_body(self) -> dict[str, object]:
        models = self.directory.describe()
        warnings = [f"{m['id']}: {m['warning']}" for m in models if m["warning"]]
        return {"models": models, "warnings": warnings}

    async def save_models(self, request: web.Request) -> web.Response:
        """Replace the catalogue: validated, its files checked (off the loop), written
        atomically, owners reassigned; the answer carries the warnings about files that
        cannot be used and pins that cannot be honoured."""
        data = await read_json(request)
        try:
            catalogue = catalogue_from(data, "request body")
        except ConfigError as exc:
            raise InvalidRequest(exc.message) from None
        if self.catalogue_file is None:
            raise InvalidRequest("this server has no catalogue file to save to")
        # shielded: a client that goes away mid-save must not leave the file saved and the
        # directory serving the old catalogue
        body = await asyncio.shield(self._save(self.catalogue_file, catalogue))
        return web.json_response(body)

    async def _save(self, path: Path, catalogue: Catalogue) -> dict[str, object]:
        # one save at a time, in the order they came: they share the temp file, and the
        # last one sent is the one that stays
        async with self._saving:
            probed = await probe(catalogue.entries)
            refused = refusals(probed)
            if refused:
                raise InvalidRequest("; ".join(refused))
            data = {"models": [e.model_dump(exclude_defaults=True) for e in catalogue.entries]}
            await asyncio.to_thread(write_json_atomically, path, data)
            self.directory.load(catalogue, probed)
            log.info("catalogue saved to %s (%d models)", path, len(catalogue.entries))
            return self._models_body()
