"""Assembles the front: the aiohttp application around the dispatcher and its engines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from coderai.config import Config, StateFiles
from coderai.errors import NoEngine
from coderai.front import live_feed
from coderai.front.aisbf.chat import BrokerAnswers
from coderai.front.aisbf.client import BrokerClient
from coderai.front.api.anthropic.reply import refuse as refuse_as_anthropic
from coderai.front.api.anthropic.routes import PREFIX as ANTHROPIC_PREFIX
from coderai.front.api.anthropic.routes import AnthropicRoutes
from coderai.front.api.openai.routes import OpenAIRoutes
from coderai.front.api.openai.tokenize import TokenizeRoutes
from coderai.front.api.responses.routes import ResponsesRoutes
from coderai.front.api.serving import Serving
from coderai.front.auth.activity import Activity
from coderai.front.auth.gate import Auth, requires_api_key
from coderai.front.auth.state_store import StateStore
from coderai.front.auth.usage import UsageLedger
from coderai.front.cluster.uplink import NodeUplink
from coderai.front.console import openapi
from coderai.front.console.accounts_api import AccountRoutes
from coderai.front.console.admin_api import AdminRoutes
from coderai.front.console.logs_api import LogsRoutes
from coderai.front.console.pulls_api import Pulls
from coderai.front.console.scan_api import ScanRoutes
from coderai.front.console.settings_api import SettingsRoutes
from coderai.front.console.site import Console
from coderai.front.console.status_api import StatusRoutes
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.engine_view import EngineView, engine_views
from coderai.front.http import add_notices, error_boundary
from coderai.front.live_feed import LiveFeed
from coderai.front.logbook import LogBook
from coderai.front.metrics import Metrics

METRICS = web.AppKey("metrics", Metrics)
#: large enough for long chat histories that carry screenshots and PDFs (Anthropic's own
#: limit for a Messages request is 32 MB), small enough that a body cannot exhaust memory
MAX_BODY_BYTES = 32 * 1024 * 1024


def count_answer(request: web.Request, response: web.StreamResponse) -> None:
    """Every /v1 answer is counted by route and status."""
    if request.path.startswith("/v1/"):
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "other"
        request.app[METRICS].requests.labels(route, str(response.status)).inc()


class Front:
    """The front's parts, for the routes that report on all of them."""

    def __init__(
        self,
        config: Config,
        files: StateFiles,
        directory: ModelDirectory,
        dispatcher: Dispatcher,
        metrics: Metrics,
        feed: LiveFeed,
        logbook: LogBook,
    ) -> None:
        self.dispatcher = dispatcher
        self.config = config  # after the dispatcher: the config is handed to it
        self.files = files
        self.directory = directory
        self.metrics = metrics
        #: the console's live feed
        self.feed = feed
        #: the recent log lines of the front and of each engine
        self.logbook = logbook
        #: the AISBF broker uplink, when broker.url is set (built with the app)
        self.broker: BrokerClient | None = None
        #: the uplink to a head, when this front is a node (cluster.head)
        self.uplink: NodeUplink | None = None

    def broker_status(self) -> dict[str, Any]:
        return self.broker.status() if self.broker is not None else {"enabled": False}

    @property
    def config(self) -> Config:
        """The settings in force; the settings routes change it, and no one else."""
        return self._config

    @config.setter
    def config(self, config: Config) -> None:
        self._config = config
        # the dispatcher reads its section at each use, so it goes by the new one at once
        self.dispatcher.settings = config.server

    def adopt(self, config: Config) -> None:
        """Put changed settings in force (the settings routes' changes)."""
        self.config = config

    def engines(self) -> list[EngineView]:
        """Every planned engine as /healthz, the admin API and /metrics show it."""
        dispatcher = self.dispatcher
        statuses = dispatcher.host.statuses()
        return engine_views(
            self.directory.plans, dispatcher.registry.all(), statuses, dispatcher.deaths,
            dispatcher.idle.unloads_at(time.time(), time.monotonic()),
        )  # fmt: skip

    def engines_body(self) -> dict[str, Any]:
        """The engines as the console's Engines panel shows them."""
        return {
            "engines": [v.public() for v in self.engines()],
            "queued": len(self.dispatcher.queue),
        }

    async def healthz(self, request: web.Request) -> web.Response:
        """200 while at least one engine serves, else 503."""
        views = self.engines()
        up = any(v.serving for v in views)
        body = {
            "status": "ok" if up else "unavailable",
            "engines": [v.public() for v in views],
            "queued": len(self.dispatcher.queue),
            "dropped_bus_frames": self.dispatcher.dropped_frames,
        }
        return web.json_response(body, status=200 if up else 503)

    async def health(self, request: web.Request) -> web.Response:
        """What vLLM's and llama.cpp's servers answer on /health, which benchmark and
        orchestration tools probe before they start: 200 while a request can be served."""
        if any(v.serving for v in self.engines()):
            return web.json_response({"status": "ok"})
        raise NoEngine("no engine is serving yet")

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), content_type="text/plain; version=0.0.4")


def build_app(front: Front, admin_key: str) -> web.Application:
    config = front.config
    store = StateStore(front.files.state_dir)
    activity = Activity(front.feed)
    usage = UsageLedger(store, (front.metrics.key_requests, front.metrics.key_tokens))
    require_key = requires_api_key(config.auth.require_api_key, config.server.host)
    refusals = {ANTHROPIC_PREFIX: refuse_as_anthropic}
    auth = Auth(admin_key, store, activity, usage, require_key, refusals)
    app = web.Application(
        middlewares=[error_boundary(count_answer), auth.middleware],
        client_max_size=MAX_BODY_BYTES,
    )
    app[METRICS] = front.metrics
    app.on_response_prepare.append(add_notices)
    dispatcher = front.dispatcher
    front.metrics.watch(dispatcher, front.engines)
    AccountRoutes(auth, usage, config.auth, front.directory).add_to(app)
    StatusRoutes(
        front.engines, lambda: len(dispatcher.queue), front.broker_status,
        lambda: front.uplink.status() if front.uplink is not None else None,
        front.feed, activity,
    ).add_to(app)  # fmt: skip
    serving = Serving(dispatcher, front.directory, front.metrics, lambda: front.config.media)
    openai = OpenAIRoutes(serving)
    openai.add_to(app)
    TokenizeRoutes(serving).add_to(app)
    AnthropicRoutes(serving, lambda: front.config.search).add_to(app)
    ResponsesRoutes(serving).add_to(app)
    admin = AdminRoutes(
        dispatcher, front.directory, front.engines, front.files.catalogue,
        config.server.drain_grace_seconds,
    )  # fmt: skip
    admin.add_to(app)
    # the directory's catalogue is replaced on each save: read it when asked
    directory = front.directory
    pulls = Pulls(front.feed, admin.add, lambda name: directory.catalogue.resolve(name) is not None)
    pulls.add_to(app)
    ScanRoutes(lambda: directory.catalogue.entries).add_to(app)
    SettingsRoutes(
        lambda: front.config, front.adopt, front.directory, front.files, front.feed,
        dispatcher.configure_engines,
    ).add_to(app)  # fmt: skip
    LogsRoutes(front.logbook).add_to(app)
    app.router.add_get("/healthz", front.healthz)
    app.router.add_get("/health", front.health)
    app.router.add_get("/metrics", front.metrics_text)
    app.router.add_get("/admin/api/openapi.json", openapi.serve)
    Console().add_to(app)
    if config.cluster.head is not None:
        base = front.files.config.parent  # key paths are relative to the config's folder
        directory = front.directory
        front.uplink = NodeUplink(
            config.cluster, base, dispatcher, directory, directory.plans, front.engines
        )
    if config.broker.url is not None:
        front.broker = BrokerClient(
            config.broker,
            BrokerAnswers(serving, activity),
            front.engines,
            config.server.stream_stall_timeout,
        )

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        await store.open()
        await usage.start()
        await dispatcher.start()  # and its engine host
        interval = config.server.heartbeat_interval
        loop = asyncio.get_running_loop()
        watchers = [
            loop.create_task(live_feed.watch(front.feed, "engines", front.engines_body, interval)),
            loop.create_task(activity.refreshing(interval)),
        ]
        if front.broker is not None:
            front.broker.start()
        if front.uplink is not None:
            front.uplink.start()
        yield
        if front.uplink is not None:
            await front.uplink.stop()  # the head hears BYE; its jobs here are cancelled
        if front.broker is not None:
            await front.broker.stop()  # its requests' jobs are cancelled with it
        for watcher in watchers:
            watcher.cancel()
        await dispatcher.stop()
        await auth.settled(timeout=2.0)  # streams whose clients left, ending with the jobs
        await usage.stop()
        await store.close()

    app.cleanup_ctx.append(lifecycle)
    return app
