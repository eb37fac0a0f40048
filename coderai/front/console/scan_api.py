"""GET /admin/api/scan: the models already on the front's machine (catalogue/model_scan.py says
where it looks; `?folder=DIR`, repeated, looks in those too), each with its catalogue
entry and what the catalogue makes of it. The console adds the ones the operator picks
with POST /admin/api/models, pointing at the files in place."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from aiohttp import web

from coderai.catalogue import model_scan
from coderai.catalogue.entries import ModelEntry
from coderai.front.http import ADMIN_PREFIX


class ScanRoutes:
    def __init__(self, entries: Callable[[], list[ModelEntry]]) -> None:
        #: the catalogue's entries now
        self.entries = entries

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(ADMIN_PREFIX + "scan", self.scan)

    async def scan(self, request: web.Request) -> web.Response:
        folders = tuple(Path(f) for f in request.query.getall("folder", []) if f)
        places = model_scan.Places.default(folders)
        found = await asyncio.to_thread(model_scan.scan, places)
        entries = self.entries()
        rows = [{**asdict(f), "standing": model_scan.standing(f, entries)} for f in found]
        return web.json_response({"found": rows})
