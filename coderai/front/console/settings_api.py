"""/admin/api/settings: the settings by dotted name, changed from the console, saved to
config.json and applied at once where they can be (settings.py says which)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from coderai.common.json_files import write_json_atomically
from coderai.common.validation import first_problem
from coderai.config import Config, StateFiles, catalogue_path
from coderai.errors import ConfigError, InvalidRequest
from coderai.front.console import settings
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.http import ADMIN_PREFIX, read_json
from coderai.front.live_feed import LiveFeed

log = logging.getLogger("coderai.front")

PREFIX = ADMIN_PREFIX


class SettingsRoutes:
    def __init__(
        self,
        current: Callable[[], Config],
        adopt: Callable[[Config], None],
        directory: ModelDirectory,
        files: StateFiles,
        feed: LiveFeed,
        configure_engines: Callable[[], None],
    ) -> None:
        #: the settings in force, and how a change to them is put in force (the front
        #: owns them: its parts read them at each use)
        self.current = current
        self.adopt = adopt
        self.directory = directory
        self.files = files
        self.feed = feed
        #: tells the engines their changed settings
        self.configure_engines = configure_engines
        #: what config.json says: the settings in force, plus changes that wait for a restart
        self.saved = current()
        self._saving = asyncio.Lock()

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(PREFIX + "settings", self.show)
        app.router.add_patch(PREFIX + "settings", self.change)
        self.feed.snapshot("settings", self.body)

    def body(self) -> dict[str, Any]:
        plans = self.directory.plans
        return {
            "values": settings.values(self.saved),
            "live": settings.LIVE_NAMES,
            "restart": settings.RESTART_NAMES,
            "engines": [p.name for p in plans],
            "gpu_vendors": settings.gpu_vendors(plans),
        }

    async def show(self, request: web.Request) -> web.Response:
        return web.json_response(self.body())

    async def change(self, request: web.Request) -> web.Response:
        """Validate, save, then apply the live ones; the answer says which applied now and
        which wait for a restart."""
        changes = await read_json(request)
        if not isinstance(changes, dict):
            raise InvalidRequest('send {"<section>.<setting>": value, ...}')
        # shielded: a client that goes away mid-save must not leave the file saved and the
        # front running on the old settings
        return web.json_response(await asyncio.shield(self._save(changes)))

    async def _save(self, changes: dict[str, object]) -> dict[str, Any]:
        # one save at a time, in the order they came: each builds on the one before, and
        # they share the temp file
        async with self._saving:
            engines = [p.name for p in self.directory.plans]
            patched = settings.patch(self.saved, changes, engines)
            names = [*patched.live, *patched.restart]
            await asyncio.to_thread(self._check_startable, patched.config, patched.restart)
            if names:
                path = self.files.config
                await asyncio.to_thread(_rewrite, path, patched.config, names)
                self.saved = patched.config
                self._apply(patched.live)
                self.feed.publish("settings", self.body())
                log.info(
                    "settings saved to %s; live: %s; at restart: %s",
                    path, ", ".join(patched.live) or "-", ", ".join(patched.restart) or "-",
                )  # fmt: skip
            return {
                "applied": patched.live,
                "at_restart": patched.restart,
                "values": settings.values(self.saved),
            }

    def _check_startable(self, config: Config, restart: list[str]) -> None:
        """What would keep the next start from serving: a bind address that does not
        resolve, a catalogue file that is not there (the front would serve the embedded
        default in its place). Blocking lookups: run off the loop."""
        if "server.host" in restart:
            try:
                socket.getaddrinfo(config.server.host, None)
            except (OSError, UnicodeError) as exc:
                message = f"server.host: {config.server.host!r} does not resolve ({exc})"
                raise InvalidRequest(message, param="server.host") from None
        if "models.catalogue" in restart:
            path = catalogue_path(config, self.files.config)
            if not path.is_file():
                raise InvalidRequest(
                    f"models.catalogue: there is no file {path}", param="models.catalogue"
                )

    def _apply(self, live: list[str]) -> None:
        """Each live change through its owner. The queue's bound and timeout need no more
        than the new config: the dispatcher reads them at each request and each sweep."""
        config = settings.adopt(self.current(), self.saved, live)
        self.adopt(config)
        if "server.default_engine" in live:
            self.directory.set_default_engine(config.server.default_engine)
        if settings.ENGINE_SETTINGS.intersection(live):
            self.configure_engines()


def _rewrite(path: Path, config: Config, names: list[str]) -> None:
    """config.json as it is now, plus the changes: what its author wrote stays as written.
    A file edited since into one that would not load is not built upon."""
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        Config.model_validate(data)
    except ValidationError as exc:
        where, message = first_problem(exc)
        problem = f"{'.'.join(where) or '(top level)'}: {message}"
        raise ConfigError(f"{path} cannot be updated, fix it first: {problem}") from None
    except (OSError, ValueError) as exc:  # unreadable, or not JSON
        raise ConfigError(f"{path} cannot be updated, fix it first: {exc}") from None
    write_json_atomically(path, settings.file_data(data, config, names))
