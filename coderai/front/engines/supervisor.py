"""Starts the engine processes, restarts those that exit, and stops them all at shutdown.

An engine that keeps dying right after start is flapping: it is backed off with growing
delays and reported (in the log and /healthz), never respawned in a tight loop. A restart
asked for (admin API) is not a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from pathlib import Path

from coderai.common.exits import exit_words
from coderai.front.engines.host import EngineStatus, HostListener
from coderai.front.engines.plan import EnginePlan
from coderai.front.logbook import LogBook, OutputRelay

log = logging.getLogger("coderai.supervisor")

#: an engine that lived less than this counts as failing at start, for back-off
STARTUP_FAILURE_SECONDS = 10.0
STOP_GRACE_SECONDS = 5.0
#: after the engines have exited at shutdown, how long their last lines have to come through
OUTPUT_DRAIN_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
#: states of an engine that is on the bus or will be shortly
_COMING = frozenset({"starting", "running", "restarting"})


def backoff_delay(consecutive_failures: int) -> float:
    """Seconds to wait before respawning: at once after one failure, then doubling."""
    if consecutive_failures <= 1:
        return 0.0
    return float(min(MAX_BACKOFF_SECONDS, 0.5 * 2 ** (consecutive_failures - 2)))


def count_failure(previous: int, lived_seconds: float, requested: bool, joined: bool = True) -> int:
    """Consecutive failures at start after an exit (a requested restart resets them). An
    engine that never joined the bus failed at start however long it lived."""
    if requested:
        return 0
    return previous + 1 if lived_seconds < STARTUP_FAILURE_SECONDS or not joined else 1


class Supervisor:
    def __init__(
        self,
        specs: list[EnginePlan],
        endpoint: str,
        token: str,
        logbook: LogBook,
        join_timeout: float = 60.0,
        state_dir: Path | None = None,
    ) -> None:
        self.specs = specs
        self.join_timeout = join_timeout
        self.endpoint = endpoint
        self._token = token
        #: told when an engine exits or will not come (the dispatcher)
        self._listener: HostListener | None = None
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.status: dict[str, EngineStatus] = {
            spec.name: EngineStatus(capabilities=spec.capabilities) for spec in specs
        }
        #: the front's state folder: its engines keep what they learn of the machine there
        #: (llama.cpp's kernel verdicts)
        self._state_dir = state_dir
        #: "pid:code" of each engine's last incarnation, for the next (it heals a SIGILL)
        self._previous: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._joined: dict[str, asyncio.Event] = {}
        self._stopping = False
        self._logbook = logbook
        #: the engines' output pipes still open (of incarnations running or just exited)
        self._relays: set[OutputRelay] = set()

    #: a supervised engine can be stopped and started again
    restartable = True

    def start(self, listener: HostListener) -> None:
        self._listener = listener
        self._tasks = [asyncio.create_task(self._keep(spec)) for spec in self.specs]

    def statuses(self) -> dict[str, EngineStatus]:
        return self.status

    def names(self) -> set[str]:
        return set(self.status)

    def joinable(self) -> set[str]:
        """Engines that requests may wait for: alive or being restarted at once. Not those
        backing off, stopped, or whose last incarnation failed to join (a request that only
        such an engine could serve gets 503 at once)."""
        return {
            name
            for name, status in self.status.items()
            if status.state in _COMING and not status.join_failed
        }

    def joined(self, name: str, pid: int) -> None:
        """The dispatcher saw this engine's HELLO. A late HELLO from an incarnation that
        was already given up on does not count for the one that replaced it."""
        proc = self.procs.get(name)
        if proc is None or proc.pid != pid:
            return
        status = self.status.get(name)
        if status is not None:
            status.join_failed = False
            if status.state == "starting":
                status.state = "running"
        event = self._joined.get(name)
        if event is not None:
            event.set()

    def kill(self, name: str, pid: int) -> None:
        """End a hung engine (SIGKILL also ends a stopped one); _keep then restarts it."""
        proc = self.procs.get(name)
        if proc is not None and proc.pid == pid and proc.returncode is None:
            log.warning("killing unresponsive engine %s (pid %d)", name, pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    async def restart(self, name: str) -> None:
        """Stop an engine (TERM, then KILL after the grace period) and start it again."""
        proc = self.procs.get(name)
        if proc is None or proc.returncode is not None:
            return
        self.status[name].restart_requested = True
        await _terminate([proc])

    async def _spawn(self, spec: EnginePlan, epoch: int) -> asyncio.subprocess.Process:
        env = {
            **os.environ,
            **spec.spawn_env(),
            "CODERAI_BUS_TOKEN": self._token,
            "CODERAI_FRONT_PID": str(os.getpid()),
            "CODERAI_PREVIOUS_EXIT": self._previous.get(spec.name, ""),
        }
        if self._state_dir is not None:
            env["CODERAI_STATE_DIR"] = str(self._state_dir)
        # The engine's stdout and stderr go to the front, which shows them and keeps them
        # for the console. A pipe of our own, not asyncio's: Process.wait() also waits for
        # asyncio's pipes to close, which a child the engine left behind could put off forever.
        reading, writing = os.pipe()
        relay = OutputRelay(reading, spec.name, self._logbook, sys.stderr.buffer)
        self._relays.add(relay)
        relay.closed.add_done_callback(lambda _: self._relays.discard(relay))
        try:
            # a new session: Ctrl-C reaches the front alone, which then stops engines in order
            return await asyncio.create_subprocess_exec(
                sys.executable, "-m", "coderai", "engine",
                "--name", spec.name,
                "--connect", self.endpoint,
                "--slots", str(spec.slots),
                "--epoch", str(epoch),
                env=env,
                stdout=writing,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        finally:
            # the engine has its own copy; ours would keep the pipe open after it exits
            os.close(writing)

    async def _keep(self, spec: EnginePlan) -> None:
        status = self.status[spec.name]
        epoch = 0
        while not self._stopping:
            epoch += 1
            started = time.monotonic()
            joined = self._joined[spec.name] = asyncio.Event()
            proc = await self._spawn(spec, epoch)
            self.procs[spec.name] = proc
            status.state, status.retry_at = "starting", None
            log.info("started engine %s (pid %d)", spec.name, proc.pid)
            code = await self._wait_joined_then_exit(spec.name, proc, joined)
            assert self._listener is not None
            self._listener.engine_exited(spec.name, proc.pid, code)
            self._previous[spec.name] = f"{proc.pid}:{code}"
            if self._stopping:
                status.state = "stopped"
                return
            requested = status.restart_requested
            status.failures = count_failure(
                status.failures, time.monotonic() - started, requested, joined.is_set()
            )
            status.restart_requested = False
            status.restarts += 1
            status.last_exit = code
            delay = backoff_delay(status.failures)
            status.state = "backoff" if delay else "restarting"
            status.retry_at = time.monotonic() + delay
            if status.flapping:
                log.error(
                    "engine %s is flapping: %d exits in a row within %.0f s of start "
                    "(the last %s); next try in %.1f s",
                    spec.name, status.failures, STARTUP_FAILURE_SECONDS, exit_words(code),
                    delay,
                )  # fmt: skip
            else:
                # an exit the operator asked for is news, not a warning
                log.log(
                    logging.INFO if requested else logging.WARNING,
                    "engine %s (pid %d) %s%s; restarting in %.1f s",
                    spec.name, proc.pid, exit_words(code), " as asked" if requested else "",
                    delay,
                )  # fmt: skip
            await asyncio.sleep(delay)

    async def _wait_joined_then_exit(
        self, name: str, proc: asyncio.subprocess.Process, joined: asyncio.Event
    ) -> int:
        """The process's exit code; it is killed if it does not join in time."""
        exited = asyncio.ensure_future(proc.wait())
        joining = asyncio.ensure_future(joined.wait())
        try:
            await asyncio.wait({exited, joining}, timeout=self.join_timeout,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
        finally:
            joining.cancel()
        if not exited.done() and not joined.is_set() and not self._stopping:
            log.error(
                "engine %s (pid %d) did not join the bus within %.0f s; killing it",
                name, proc.pid, self.join_timeout,
            )  # fmt: skip
            self.status[name].join_failed = True
            if self._listener is not None:
                self._listener.answer_unservable()
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        return await exited

    async def stop(self) -> None:
        """TERM every engine, KILL what is left after the grace period."""
        self._stopping = True
        await _terminate([p for p in self.procs.values() if p.returncode is None])
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._relays:
            await asyncio.wait([r.closed for r in self._relays], timeout=OUTPUT_DRAIN_SECONDS)
        for relay in list(self._relays):
            relay.close()


async def _terminate(procs: list[asyncio.subprocess.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
    try:
        async with asyncio.timeout(STOP_GRACE_SECONDS):
            await asyncio.gather(*(p.wait() for p in procs))
    except TimeoutError:
        for proc in procs:
            if proc.returncode is None:
                log.warning("engine pid %d ignored SIGTERM; killing it", proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        await asyncio.gather(*(p.wait() for p in procs))
