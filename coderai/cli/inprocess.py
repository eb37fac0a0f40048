"""--single-process: one engine on a thread of the front's process, speaking the same bus
protocol over inproc://. No isolation (model work shares the front's GIL and can crash
it); for machines where one process is enough. Beside the front and the engine, not
in either: the front never imports the engine; `coderai run --single-process` gives the
front this module's `in_process`."""

from __future__ import annotations

import asyncio
import logging
import threading

import zmq

from coderai.engine.backends.llamacpp.repack import KERNELS
from coderai.engine.worker import EngineSettings, EngineWorker
from coderai.front.engines.host import EngineHost, EngineStatus, HostListener
from coderai.front.engines.plan import EnginePlan

log = logging.getLogger("coderai.front")

ENDPOINT = "inproc://coderai-bus"


def in_process(
    plan: EnginePlan, context: zmq.Context[zmq.Socket[bytes]], token: str
) -> tuple[str, EngineHost]:
    """The engine of --single-process and the endpoint it joins (front.engines.InProcess)."""
    return ENDPOINT, InProcessEngine(plan, context, token)


class InProcessEngine:
    def __init__(
        self, plan: EnginePlan, context: zmq.Context[zmq.Socket[bytes]], token: str
    ) -> None:
        settings = EngineSettings(
            name=plan.name,
            connect=ENDPOINT,
            slots=plan.slots,
            token=token,
            epoch=1,
            backend=plan.backend,
            capabilities=list(plan.capabilities),
        )
        # inproc endpoints exist only within one libzmq context: share the front's
        self.worker = EngineWorker(settings, context=context)
        self.name = plan.name
        self._thread = threading.Thread(target=self._run, name=f"engine-{plan.name}", daemon=True)

    def _run(self) -> None:
        try:
            code = asyncio.run(self.worker.run())
        finally:
            KERNELS.close()  # the engine's list of models with llama.cpp's extra buffer types on
        log.info("in-process engine %s stopped (%d)", self.name, code)

    #: the engine is a thread of this process: there is nothing to stop and start again
    restartable = False

    def start(self, listener: HostListener) -> None:
        self._thread.start()

    def names(self) -> set[str]:
        return {self.name}

    def joinable(self) -> set[str]:
        return {self.name} if self._thread.is_alive() else set()

    def joined(self, name: str, pid: int) -> None:
        """Nothing to track: the engine lives as long as its thread."""

    def kill(self, name: str, pid: int) -> None:
        """A thread cannot be killed; a hung in-process engine hangs the front as well."""

    async def restart(self, name: str) -> None:
        """Not restartable (see restartable)."""

    def statuses(self) -> dict[str, EngineStatus]:
        return {}

    async def stop(self) -> None:
        self.worker.request_stop()
        await asyncio.to_thread(self._thread.join, 10)
