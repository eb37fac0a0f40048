"""/admin/api: what the front knows now — activity, status and the console's live feed.
Each answers from the front's own state and never waits on an engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psutil
from aiohttp import web

from coderai.front.auth.activity import Activity
from coderai.front.console import events as console_events
from coderai.front.dispatch.engine_view import EngineView
from coderai.front.http import ADMIN_PREFIX
from coderai.front.live_feed import LiveFeed

PREFIX = ADMIN_PREFIX


class StatusRoutes:
    def __init__(
        self,
        views: Callable[[], list[EngineView]],
        queued: Callable[[], int],
        broker: Callable[[], dict[str, Any]],
        uplink: Callable[[], dict[str, Any] | None],
        feed: LiveFeed,
        activity: Activity,
    ) -> None:
        #: every planned engine, the requests queued, the broker uplink's and the head
        #: uplink's status (None when this front is no node), as they are when asked
        self.views = views
        self.queued = queued
        self.broker_status = broker
        self.uplink_status = uplink
        self.feed = feed
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
        views = [v.public() for v in self.views()]
        memory = psutil.virtual_memory()
        body = {
            "engines": views,
            "queued": self.queued(),
            "ram": {
                "total": memory.total,
                "available": memory.available,
                "engines_rss": sum(v["rss"] for v in views),
            },
            # VRAM is null for an engine that reports no card
            "vram": {v["name"]: v.get("vram") for v in views},
            "cooldowns": {v["name"]: v["cooldown"] for v in views if v.get("cooldown")},
            "broker": self.broker_status(),
            # this front as a node of a head (cluster.head), if it is one
            "uplink": self.uplink_status(),
        }
        return web.json_response(body)

    async def broker(self, request: web.Request) -> web.Response:
        """The AISBF uplink: its state, session, last error and requests."""
        return web.json_response(self.broker_status())

    async def events(self, request: web.Request) -> web.StreamResponse:
        return await console_events.stream(request, self.feed)
