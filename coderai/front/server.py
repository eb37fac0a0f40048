"""`coderai run`: the front process. Binds the bus in a private runtime directory, starts
the engines (supervised processes, or one in-process engine with --single-process) and
serves HTTP until SIGINT/SIGTERM. Then it stops listening, lets the requests it holds
finish for the grace period, ends every one left with a 503 (an error event, for a stream
that has begun), stops the engines and removes its sockets."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import signal

import zmq
from aiohttp import web

from coderai.bus.sockets import ipc_endpoint, private_runtime_dir
from coderai.catalogue.entries import Catalogue
from coderai.config import Config, StateFiles, engine_settings
from coderai.errors import ConfigError
from coderai.front.app import Front, build_app
from coderai.front.auth.gate import requires_api_key
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.probe import Probed, probe, refusals, with_templates
from coderai.front.dispatch.registry import EngineRecord
from coderai.front.engines.gpus import NvmlSensor
from coderai.front.engines.host import EngineHost, InProcess
from coderai.front.engines.plan import plan_engines
from coderai.front.engines.supervisor import Supervisor
from coderai.front.http import MALFORMED_REQUEST_LOG
from coderai.front.live_feed import LiveFeed
from coderai.front.logbook import LogBook
from coderai.front.metrics import Metrics

log = logging.getLogger("coderai.front")

#: after the grace period, how long handlers have to write their final event
LAST_WRITE_SECONDS = 2.0


async def serve(
    config: Config, catalogue: Catalogue, files: StateFiles, in_process: InProcess | None = None
) -> int:
    runtime_dir = private_runtime_dir()
    try:
        # before the site starts, so no request finds the catalogue unchecked; off the loop
        # all the same, so a file that cannot be read never holds startup past the deadline
        catalogue = await with_templates(catalogue)  # a template that cannot be used stops it
        probed = await probe(catalogue.entries)
        for why in refusals(probed, catalogue.entries):  # a request to it says so again
            log.warning("catalogue: %s", why)
        front = assemble(config, files, catalogue, probed, runtime_dir, in_process)
        admin_key = config.auth.admin_key
        if admin_key is None:
            admin_key = secrets.token_urlsafe(24)
            log.warning("no auth.admin_key configured; this run's admin API key: %s", admin_key)
        app = build_app(front, admin_key)
        # A client that disconnects cancels its handler, which cancels its job (invariant
        # 3); at shutdown, requests in flight get the grace period to finish.
        # Our own grace period comes first (see below); aiohttp's shutdown timeout is then
        # only the time handlers get to write their last events.
        logging.getLogger("aiohttp.server").addFilter(MALFORMED_REQUEST_LOG)
        runner = web.AppRunner(
            app,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=LAST_WRITE_SECONDS,
            # a body left unread (one that could not be decoded) closes the connection
            # rather than being read on for seconds, and re-raising its error, afterwards
            lingering_time=0,
        )
        await runner.setup()
        # a deep accept backlog: bursts of thousands of clients connect at once
        host, port = config.server.host, config.server.port
        site = web.TCPSite(runner, host, port, backlog=4096)
        try:
            await site.start()
        except OSError as exc:  # a name that does not resolve, a port in use
            await runner.cleanup()  # the engines it started stop with it
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        log.info("CoderAI listening on http://%s:%d", host, port)
        if requires_api_key(config.auth.require_api_key, host):
            log.info("/v1 requires an API key (auth.require_api_key; create one: coderai keys)")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        grace = config.server.shutdown_grace_seconds
        log.info("shutting down (up to %.0f s for requests in flight)", grace)
        for listening in runner.sites:
            await listening.stop()
        front.feed.close()  # consoles' live streams end; they are no request to wait for
        ended = await front.dispatcher.shutdown(grace)
        if ended:
            log.warning("%d requests were unfinished after %.0f s; ended with 503", ended, grace)
        await runner.cleanup()
        return 0
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)


def assemble(
    config: Config,
    files: StateFiles,
    catalogue: Catalogue,
    probed: dict[str, Probed],
    runtime_dir: str,
    in_process: InProcess | None = None,
) -> Front:
    """The front's parts. `in_process` runs the engine of --single-process (given by the
    command that starts the front: the front never imports the engine itself)."""
    token = secrets.token_hex(16)
    plans = plan_engines(config, NvmlSensor().nvidia_gpus())
    if config.server.single_process:
        plans = plans[:1]
    directory = ModelDirectory(catalogue, probed, plans, config.server.default_engine)
    feed = LiveFeed()
    # --single-process: the engine logs through this process's loggers, so under "front"
    logbook = LogBook([] if config.server.single_process else [p.name for p in plans])

    def settings(name: str) -> dict[str, object]:
        # the front's, read at each use: the console may have changed them since start
        return engine_settings(front.config, name)

    def preloads(engine: EngineRecord) -> list[dict[str, object]]:
        return [directory.spec_of(e) for e in directory.preloads_for(engine)]

    if config.server.single_process and in_process is None:
        raise ConfigError("server.single_process: this front was started without an engine")
    host: EngineHost
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    if in_process is not None and config.server.single_process:
        # inproc:// endpoints exist only within one context: the engine shares the front's;
        # and what it learns of the machine goes in the front's state folder, as a
        # spawned engine's does (the supervisor passes that in the engine's environment)
        os.environ["CODERAI_STATE_DIR"] = str(files.state_dir)
        endpoint, host = in_process(plans[0], context, token)
        log.info("single-process mode: engine %s runs inside the front", plans[0].name)
    else:
        endpoint = ipc_endpoint(runtime_dir)
        host = Supervisor(plans, endpoint, token, logbook, config.server.engine_join_timeout,
                          files.state_dir)  # fmt: skip
    cluster = None
    if config.cluster.bind is not None:
        from coderai.front.cluster.router import ClusterRouter

        cluster = ClusterRouter(files.state_dir, config.cluster.bind)

    def keep_alive_of(model_id: str) -> float:
        return directory.keep_alive_of(model_id, front.config.models.keep_alive)

    dispatcher = Dispatcher(
        config.server, endpoint, token, host, settings, preloads, context=context,
        cluster=cluster, remote_engines_changed=directory.set_remote_engines,
        keep_alive_of=keep_alive_of, kept_loaded=directory.kept_loaded,
    )  # fmt: skip
    front = Front(config, files, directory, dispatcher, Metrics(), feed, logbook)
    return front
