"""`coderai run`: the front process. Binds the bus in a private runtime directory, starts
the supervised engines and serves HTTP until SIGINT/SIGTERM, then stops it all and
removes its sockets."""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
import signal
from pathlib import Path

from aiohttp import web

from coderai.bus.sockets import ipc_endpoint, private_runtime_dir
from coderai.config import Catalogue, Config, engine_settings
from coderai.front.app import build_app
from coderai.front.dispatcher import Dispatcher
from coderai.front.engine_plan import plan_engines
from coderai.front.gpus import NvmlSensor
from coderai.front.models import ModelDirectory
from coderai.front.registry import EngineRecord
from coderai.front.supervisor import Supervisor

log = logging.getLogger("coderai.front")


async def serve(config: Config, catalogue: Catalogue, catalogue_file: Path | None = None) -> int:
    runtime_dir = private_runtime_dir()
    try:
        endpoint = ipc_endpoint(runtime_dir)
        token = secrets.token_hex(16)
        plans = plan_engines(config, NvmlSensor().nvidia_gpus())
        models = ModelDirectory(catalogue, plans, config.server.default_engine)
        dispatcher = Dispatcher(
            config.server, endpoint, token, engine_config=lambda name: engine_settings(config, name)
        )
        supervisor = Supervisor(plans, endpoint, token, dispatcher.engine_exited)
        dispatcher.engines_running = supervisor.running
        dispatcher.kill_engine = supervisor.kill

        def preload(engine: EngineRecord) -> None:
            for entry in models.preloads_for(engine):
                log.info("asking engine %s to load %s now", engine.name, entry.id)
                dispatcher.control(engine, "load", {"model": entry.spec(models.format_of(entry))})

        dispatcher.on_join = preload
        admin_key = config.auth.admin_key
        if admin_key is None:
            admin_key = secrets.token_urlsafe(24)
            log.warning("no auth.admin_key configured; this run's admin API key: %s", admin_key)
        app = build_app(models, dispatcher, supervisor, admin_key, catalogue_file)
        # a client that disconnects cancels its handler, which cancels its job (invariant 3)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, config.server.host, config.server.port)
        await site.start()
        log.info("CoderAI listening on http://%s:%d", config.server.host, config.server.port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("shutting down")
        await runner.cleanup()
        return 0
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)
