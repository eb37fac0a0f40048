"""Starts the engine processes, restarts those that exit, and stops them all at shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable

from coderai.front.engine_plan import EnginePlan

log = logging.getLogger("coderai.supervisor")

#: an engine that lived less than this counts as failing at start, for back-off
STARTUP_FAILURE_SECONDS = 10.0
STOP_GRACE_SECONDS = 5.0


def backoff_delay(consecutive_failures: int) -> float:
    """Seconds to wait before respawning: immediate once, then doubling up to 30 s."""
    if consecutive_failures <= 1:
        return 0.0
    return float(min(30.0, 0.5 * 2 ** (consecutive_failures - 2)))


class Supervisor:
    def __init__(
        self,
        specs: list[EnginePlan],
        endpoint: str,
        token: str,
        on_exit: Callable[[str, int | None], None],
    ) -> None:
        self.specs = specs
        self.endpoint = endpoint
        self._token = token
        self._on_exit = on_exit
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.restarts: dict[str, int] = {spec.name: 0 for spec in specs}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._keep(spec)) for spec in self.specs]

    def running(self) -> set[str]:
        """Names of engines whose process is alive (joined the bus or not yet)."""
        return {name for name, p in self.procs.items() if p.returncode is None}

    def kill(self, name: str, pid: int) -> None:
        """End a hung engine (SIGKILL also ends a stopped one); _keep then restarts it."""
        proc = self.procs.get(name)
        if proc is not None and proc.pid == pid and proc.returncode is None:
            log.warning("killing unresponsive engine %s (pid %d)", name, pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    async def _spawn(self, spec: EnginePlan, epoch: int) -> asyncio.subprocess.Process:
        env = {
            **os.environ,
            **spec.spawn_env(),
            "CODERAI_BUS_TOKEN": self._token,
            "CODERAI_FRONT_PID": str(os.getpid()),
        }
        # a new session: Ctrl-C reaches the front alone, which then stops engines in order
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "coderai", "engine",
            "--name", spec.name,
            "--connect", self.endpoint,
            "--slots", str(spec.slots),
            "--epoch", str(epoch),
            env=env,
            start_new_session=True,
        )  # fmt: skip

    async def _keep(self, spec: EnginePlan) -> None:
        failures = 0
        epoch = 0
        while not self._stopping:
            epoch += 1
            started = time.monotonic()
            proc = await self._spawn(spec, epoch)
            self.procs[spec.name] = proc
            log.info("started engine %s (pid %d)", spec.name, proc.pid)
            code = await proc.wait()
            self._on_exit(spec.name, proc.pid)
            if self._stopping:
                return
            failures = failures + 1 if time.monotonic() - started < STARTUP_FAILURE_SECONDS else 1
            delay = backoff_delay(failures)
            self.restarts[spec.name] += 1
            log.warning(
                "engine %s (pid %d) exited with %s; restarting in %.1f s",
                spec.name, proc.pid, code, delay,
            )  # fmt: skip
            await asyncio.sleep(delay)

    async def stop(self) -> None:
        """TERM every engine, KILL what is left after the grace period."""
        self._stopping = True
        running = [p for p in self.procs.values() if p.returncode is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        try:
            async with asyncio.timeout(STOP_GRACE_SECONDS):
                await asyncio.gather(*(p.wait() for p in running))
        except TimeoutError:
            for proc in running:
                if proc.returncode is None:
                    log.warning("engine pid %d ignored SIGTERM; killing it", proc.pid)
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            await asyncio.gather(*(p.wait() for p in running))
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
