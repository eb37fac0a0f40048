"""/admin/api: engines and models as the front sees them (auth/gate.py admits the caller)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from coderai.bus.kinds import ControlAction
from coderai.bus.messages import ModelSpec
from coderai.catalogue import entry_estimate
from coderai.catalogue.entries import Catalogue, ModelEntry, catalogue_from
from coderai.common.json_files import write_json_atomically
from coderai.errors import (
    CoderaiError,
    ConfigError,
    Conflict,
    InvalidRequest,
    ModelFileError,
    NoEngine,
    NotFound,
)
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.engine_view import EngineView
from coderai.front.dispatch.probe import probe, refusals, with_templates
from coderai.front.http import ADMIN_PREFIX, read_json, validate

log = logging.getLogger("coderai.front")

PREFIX = ADMIN_PREFIX
#: the most an estimate may take to read a model's header (a file on a stalled disk)
ESTIMATE_SECONDS = 10


class AdminRoutes:
    def __init__(
        self,
        dispatcher: Dispatcher,
        directory: ModelDirectory,
        views: Callable[[], list[EngineView]],
        catalogue_file: Path,
        drain_grace: float,
    ) -> None:
        self.dispatcher = dispatcher
        self.directory = directory
        self.host = dispatcher.host
        #: every planned engine as the front sees it now
        self.views = views
        self.catalogue_file = catalogue_file
        self.drain_grace = drain_grace
        self._saving = asyncio.Lock()

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(PREFIX + "engines", self.engines)
        app.router.add_post(PREFIX + "engines/{name}/drain", self.drain)
        app.router.add_post(PREFIX + "engines/{name}/unload", self.unload)
        app.router.add_post(PREFIX + "engines/{name}/restart", self.restart)
        app.router.add_get(PREFIX + "models", self.models)
        app.router.add_put(PREFIX + "models", self.save_models)
        app.router.add_post(PREFIX + "models", self.add_model)
        # a model id may hold slashes ("org/name")
        app.router.add_patch(PREFIX + "models/{id:.+}", self.edit_model)
        app.router.add_delete(PREFIX + "models/{id:.+}", self.remove_model)
        app.router.add_post(PREFIX + "models/{id:.+}/load", self.load_model)
        app.router.add_post(PREFIX + "models/{id:.+}/unload", self.unload_model)
        app.router.add_get(PREFIX + "models/{id:.+}/estimate", self.estimate)

    def _engine_name(self, request: web.Request) -> str:
        name = request.match_info["name"]
        record = self.dispatcher.registry.by_name(name)
        remote = record is not None and record.remote_key is not None
        if name not in {p.name for p in self.directory.plans} and not remote:
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
        record = self.dispatcher.registry.by_name(name)
        if record is not None and record.remote_key is not None:
            # no host runs it: it is asked to start over (a new incarnation joins, and
            # takes the drained one's place)
            cancelled = await self.dispatcher.drain(name, self.drain_grace)
            self.dispatcher.control(record, ControlAction.RECONNECT, {})
            log.info("engine %s asked to reconnect (%d requests cancelled)", name, cancelled)
            return web.json_response({"engine": name, "state": "reconnecting",
                                      "cancelled": cancelled})  # fmt: skip
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
        engines = [p.name for p in self.directory.plans]
        return {"models": models, "warnings": warnings, "engines": engines}

    def _entry_at(self, request: web.Request) -> ModelEntry:
        return _find(self.directory.catalogue.entries, request.match_info["id"])

    async def add_model(self, request: web.Request) -> web.Response:
        """Add one entry; its warnings (file, pin) come back with the catalogue."""
        entry = validate(ModelEntry, await read_json(request))
        return web.json_response(await self.add(entry))

    async def add(self, entry: ModelEntry) -> dict[str, object]:
        """Add one entry (a request's, or a finished pull's): the catalogue saved."""

        def add(entries: list[ModelEntry]) -> list[ModelEntry]:
            if any(e.id == entry.id for e in entries):
                raise Conflict(f"a model with id {entry.id!r} exists", param="id")
            return [*entries, entry]

        return await self._change(add)

    async def edit_model(self, request: web.Request) -> web.Response:
        """Change some fields of one entry (`"engine": null` unpins it)."""
        model_id = request.match_info["id"]
        changes = await read_json(request)
        if not isinstance(changes, dict):
            raise InvalidRequest("send the fields to change as a JSON object")
        if changes.get("id", model_id) != model_id:
            raise InvalidRequest("a model's id cannot change; add it anew", param="id")

        def edit(entries: list[ModelEntry]) -> list[ModelEntry]:
            current = _find(entries, model_id)
            edited = validate(ModelEntry, {**current.model_dump(exclude_defaults=True), **changes})
            return [edited if e is current else e for e in entries]

        before = self._spec_of(model_id)
        saved = await self._change(edit)
        after = self._spec_of(model_id)
        # engines holding the model learn whether it is kept loaded now (their own unloads
        # for room read it) from its spec again, which loads nothing already loaded; a
        # spec that changed otherwise is another model, which its first job brings
        same = (
            before is not None
            and after is not None
            and ModelSpec.parse(before).key() == ModelSpec.parse(after).key()
        )
        if "keep_loaded" in changes and same:
            for record in self.dispatcher.registry.all():
                if model_id in record.loaded:
                    self.dispatcher.control(record, ControlAction.LOAD, {"model": after})
        return web.json_response(saved)

    def _spec_of(self, model_id: str) -> dict[str, object] | None:
        """What an engine is sent for the entry now; None if its file cannot be used."""
        entry = self.directory.catalogue.resolve(model_id)
        if entry is None:
            return None
        try:
            return self.directory.spec_of(entry)
        except CoderaiError:
            return None

    async def remove_model(self, request: web.Request) -> web.Response:
        model_id = request.match_info["id"]

        def remove(entries: list[ModelEntry]) -> list[ModelEntry]:
            current = _find(entries, model_id)
            return [e for e in entries if e is not current]

        return web.json_response(await self._change(remove))

    async def _change(
        self, change: Callable[[list[ModelEntry]], list[ModelEntry]]
    ) -> dict[str, object]:
        """Save the catalogue `change` makes of the one in force when its turn to save
        comes, so that two edits at once both land."""

        def make() -> Catalogue:
            try:
                return Catalogue(change(list(self.directory.catalogue.entries)))
            except ConfigError as exc:  # e.g. an alias another entry uses
                raise InvalidRequest(exc.message) from None

        return await asyncio.shield(self._save(self.catalogue_file, make))

    async def load_model(self, request: web.Request) -> web.Response:
        """Its owner engine loads it now (as load_mode "load" does at start); each of its
        replicas' engines, for a model with replicas."""
        entry = self._entry_at(request)
        spec = self.directory.spec_of(entry)  # a file that cannot be used answers its 503
        owner = self.directory.owner_of(entry)
        names = self.directory.replicas_of(entry) or ((owner,) if owner else ())
        records = [r for n in names if (r := self.dispatcher.registry.by_name(n)) is not None]
        if not records:
            raise NoEngine(f"no engine on the bus can run {entry.id!r} now")
        for record in records:
            self.dispatcher.control(record, ControlAction.LOAD, {"model": spec})
        body = {"model": entry.id, "engine": records[0].name, "engines": [r.name for r in records]}
        return web.json_response(body, status=202)

    async def unload_model(self, request: web.Request) -> web.Response:
        """Every engine unloads the model's idle instances (busy ones finish first)."""
        entry = self._entry_at(request)
        engines = self.dispatcher.registry.all()
        for record in engines:
            self.dispatcher.control(record, ControlAction.UNLOAD, {"model": entry.id})
        body = {"model": entry.id, "engines": [r.name for r in engines]}
        return web.json_response(body, status=202)

    async def estimate(self, request: web.Request) -> web.Response:
        """The memory the model takes loaded (weights, KV cache, compute), against the room
        where its owner engine loads it: the free VRAM of its cards, else this host's
        available RAM; and the largest context that fits. A model loaded there already
        holds part of that memory: `loaded` says so."""
        entry = self._entry_at(request)
        owner = self.directory.owner_of(entry)
        view = next((v for v in self.views() if v.name == owner), None)
        vram = view.vram() if view is not None else None
        host = entry_estimate.host_room()
        if vram is not None and vram["total_mb"]:
            # readings are MiB as NVML gives them: fractional
            free = int((vram["total_mb"] - vram["used_mb"]) * (1 << 20))
            room, on_gpu, where = free, True, "VRAM"
        else:
            room, on_gpu, where = host, False, "RAM"
        try:
            reading = asyncio.to_thread(entry_estimate.estimate, entry, room, on_gpu, where, host)
            found = await asyncio.wait_for(reading, ESTIMATE_SECONDS)
        except ModelFileError as exc:
            raise InvalidRequest(exc.message) from None
        except TimeoutError:
            raise InvalidRequest(f"{entry.path} took over {ESTIMATE_SECONDS} s to read") from None
        loaded = view is not None and entry.id in view.loaded_models
        return web.json_response({"model": entry.id, "engine": owner, "loaded": loaded,
                                  **found.public()})  # fmt: skip

    async def save_models(self, request: web.Request) -> web.Response:
        """Replace the catalogue: validated, its files checked (off the loop), written
        atomically, owners reassigned; the answer carries the warnings about files that
        cannot be used and pins that cannot be honoured."""
        data = await read_json(request)
        try:
            catalogue = catalogue_from(data, "request body")
        except ConfigError as exc:
            raise InvalidRequest(exc.message) from None
        # shielded: a client that goes away mid-save must not leave the file saved and the
        # directory serving the old catalogue
        body = await asyncio.shield(self._save(self.catalogue_file, lambda: catalogue))
        return web.json_response(body)

    async def _save(self, path: Path, make: Callable[[], Catalogue]) -> dict[str, object]:
        # one save at a time, in the order they came: they share the temp file, and the
        # last one sent is the one that stays
        async with self._saving:
            try:
                catalogue = await with_templates(make())
            except ConfigError as exc:  # a chat template file that cannot be read or used
                raise InvalidRequest(exc.message) from None
            probed = await probe(catalogue.entries)
            refused = refusals(probed, catalogue.entries)
            if refused:
                raise InvalidRequest("; ".join(refused))
            data = {"models": [e.model_dump(exclude_defaults=True) for e in catalogue.entries]}
            await asyncio.to_thread(write_json_atomically, path, data)
            self.directory.load(catalogue, probed)
            log.info("catalogue saved to %s (%d models)", path, len(catalogue.entries))
            return self._models_body()


def _find(entries: list[ModelEntry], model_id: str) -> ModelEntry:
    """The entry with this id (not an alias: edits are exact)."""
    for entry in entries:
        if entry.id == model_id:
            return entry
    raise NotFound(f"no model with id {model_id!r} in the catalogue")
