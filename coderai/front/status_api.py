"""/admin/api: what the front knows now — activity, status and the console's live feed.
Each answers from the front's own state and never waits on an engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psutil
from aiohttp import web

from coderai.front import console_events
from coderai.front.activity import Activity
from coderai.front.http import ADMIN_PREFIX

if TYPE_CHECKING:
    from coderai.front.app import Front

PREFIX = ADMIN_PREFIX


class StatusRoutes:
    def __init__(self, front: Front, activity: Activity) -> None:
        self.front = front
        self.activity = activity

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(PREFIX + "activity", self.activity_body)
        app.router.add_get(PREFIX + "status", self.status)
        app.router.add_get(PREFIX + "broker", self.broker)
        app.router.add_get(PREFIX + "events", self.events)

    async def activity_body(self, request: web.Request) -> web.Response:
        return web.json_response(self.activity.snapshot())

    async def status(self, request: web.Request) -> web.Response:
        """Engines, host memory, VRAM per engine and cooldowns. RAM is read from the
        kernel (psutil: one /proc read, microseconds); the rest from heartbeats."""
        views = [v.public() for v in self.front.engines()]
        memory = psutil.virtual_memory()
        body = {
            "engines": views,
            "queued": len(self.front.dispatcher.queue),
            "ram": {
                "total": memory.total,
                "available": memory.available,
                "engines_rss": sum(v["rss"] for v in views),
            },
            # VRAM is null for an engine that reports no card
            "vram": {v["name"]: v.get("vram") for v in views},
            "cooldowns": {v["name"]: v["cooldown"] for v in views if v.get("cooldown")},
            "broker": self.front.broker_status(),
            # this front as a node of a head (cluster.head), if it is one
            "uplink": self.front.uplink.status() if self.front.uplink is not None else None,
        }
        return web.json_response(body)

    async def broker(self, request: web.Request) -> web.Response:
        """The AISBF uplink: its state, session, last error and requests."""
        return web.json_response(self.front.broker_status())

    async def events(self, request: web.Request) -> web.StreamResponse:
        return await console_events.stream(request, self.front.hub)
