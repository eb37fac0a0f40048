"""The engine process: one DEALER socket owned by the event loop, one scheduler thread.

The loop only moves messages: it validates what arrives, hands jobs to the scheduler and
sends what the outbox collects, plus heartbeats. Model work happens on other threads, so
heartbeats keep flowing while a model loads or a step runs long.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import psutil
import zmq

from coderai.bus.codec import decode, encode, unreadable_job_id
from coderai.bus.kinds import ControlAction, EngineState, FailKind
from coderai.bus.link import RECONNECT_FIRST, BusLink, next_epoch
from coderai.bus.loop_socket import LoopSocket
from coderai.bus.messages import (
    KEEPALIVE,
    Bye,
    Cancel,
    Control,
    EngineConfig,
    Fail,
    Heartbeat,
    Hello,
    Hold,
    Job,
    Message,
    ModelSpec,
    Ping,
    Refuse,
    Resume,
    Welcome,
)
from coderai.common.logthrottle import ThrottledLog
from coderai.engine.backends import available_backends
from coderai.engine.machine.fleet import fleet_usage
from coderai.engine.machine.readings import Readings, free_vram_bytes
from coderai.engine.machine.sensors import sensors_for
from coderai.engine.machine.thermal import Cooldown, ThermalPolicy, next_cooldown
from coderai.engine.outbox import Outbox
from coderai.engine.pool import still_to_load
from coderai.engine.scheduler import Scheduler
from coderai.errors import BusProtocolError

log = logging.getLogger("coderai.engine")

HANDSHAKE_TIMEOUT = 15.0
SWITCH_INTERVAL = 0.0005
EXIT_REFUSED = 3
EXIT_FRONT_GONE = 4
EXIT_SCHEDULER_CRASHED = 5
MIB = 1 << 20
#: how long a remote engine starting over waits for its scheduler to end its jobs
START_OVER_TIMEOUT = 10.0


@dataclass
class EngineSettings:
    name: str
    connect: str
    slots: int
    token: str
    epoch: int
    backend: str = "cpu"
    capabilities: list[str] = field(default_factory=list)
    front_pid: int | None = None
    gpus: list[str] = field(default_factory=list)
    #: a front on another machine (tcp://): its public key, and this engine's public and
    #: secret keys (CURVE); None: a local front, reached over ipc with the run's token
    curve: tuple[bytes, bytes, bytes] | None = None


#: how long a stopping engine waits for its scheduler to keep what its models would lose
#: (within the supervisor's 5 s between SIGTERM and SIGKILL; the models' own bound is
#: less: batch.PERSIST_SECONDS)
PERSIST_SECONDS = 4.0


class FleetRoom(NamedTuple):
    """One measure of the fleet under its RAM cap, as the heartbeat reports it (MiB)."""

    room_mb: float  #: the cap less the fleet's RSS (negative: over it)
    coming_mb: float  #: what this engine's loads in flight have yet to take
    wants_mb: float  #: what its loads held back for room need


class Joined(enum.Enum):
    """How an attempt to join the bus ended."""

    JOINED = "joined"  #: WELCOME
    REFUSED = "refused"  #: REFUSE, with the front's reason (logged)
    LATE = "late"  #: no answer in time
    STOPPED = "stopped"  #: told to stop while it waited


class EngineWorker:
    def __init__(
        self, settings: EngineSettings, context: zmq.Context[zmq.Socket[bytes]] | None = None
    ) -> None:
        self.settings = settings
        #: a context shared with an in-process front (inproc://); None: this process's own
        self._shared_context = context
        backends = available_backends()
        wanted = settings.capabilities or sorted(backends)
        missing = [c for c in wanted if c not in backends]
        if missing:
            log.warning("engine %s lacks the libraries for %s", settings.name, ", ".join(missing))
        self.capabilities = [c for c in wanted if c in backends]
        self._backends = {k: v for k, v in backends.items() if k in self.capabilities}
        self.identity = self._identity()
        self.dropped_frames = 0
        self._drop_log = ThrottledLog(log)
        self._exit_code = 0
        self._stop: asyncio.Event
        self._sensors = sensors_for(settings.gpus)
        self._readings = Readings()
        self._thermal = ThermalPolicy()
        self._cooldown: Cooldown | None = None
        #: an engine on another machine (CURVE) starts over when its front falls silent;
        #: a local one exits with its front instead (its parent's pid tells)
        self._reconnects = settings.curve is not None
        #: at the last measure of the fleet: the room under its RAM cap, what this
        #: engine's loads in flight have yet to take, and what its loads wait for, in MiB
        #: (None: no cap); measures taken
        self._room: FleetRoom | None = None
        self._measures = 0
        self._proc = psutil.Process()
        self._sending: set[asyncio.Task[None]] = set()
        #: the DEALER and its beat, once run() has made it (a new socket per incarnation)
        self._bus: BusLink | None = None
        #: the loop run() runs on, for request_stop() from another thread
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self) -> int:
        # A decode step that holds the GIL (pure-Python work) would otherwise keep the
        # socket's thread waiting up to the default 5 ms switch interval.
        sys.setswitchinterval(SWITCH_INTERVAL)
        loop = self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._front_silent = asyncio.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._stop.set)
        ctx: zmq.Context[zmq.Socket[bytes]] = self._shared_context or zmq.Context()
        outbox = self._outbox = Outbox(loop)
        self.scheduler = Scheduler(self._backends, outbox, self.settings.slots)
        self.scheduler.pool.fleet_meter = lambda: fleet_usage(self.settings.front_pid)
        self.scheduler.pool.vram_meter = lambda: free_vram_bytes(self._sensors.read())
        thread = threading.Thread(target=self._schedule, name="scheduler", daemon=True)
        self._bus = BusLink(ctx, self.settings.connect, self.settings.curve, self._on_frames)
        try:
            while True:
                joined = await self._join()
                if joined is Joined.STOPPED:
                    return 0
                if joined is Joined.REFUSED or (joined is Joined.LATE and not self._reconnects):
                    return EXIT_REFUSED
                if joined is Joined.LATE:
                    delay = self._link.backoff()
                    log.warning("no front answered; trying again in %.1f s", delay)
                    if await self._stops_within(delay):
                        return 0
                    self._new_incarnation()
                    continue
                if thread.ident is None:
                    thread.start()
                if not await self._serve(outbox):
                    break
                if not await self._start_over():
                    return self._exit_code
                if await self._stops_within(RECONNECT_FIRST):
                    return 0
            if self._exit_code == 0:
                with contextlib.suppress(zmq.ZMQError, TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._send(encode(Bye("shutdown")))
            return self._exit_code
        finally:
            self.scheduler.stop()
            if thread.ident is not None:
                # its last act keeps what the models would lose (pool.close: the prompt
                # cache on disk); the thread is a daemon, which the process's end would cut
                await asyncio.to_thread(thread.join, PERSIST_SECONDS)
            if self._bus is not None:
                self._bus.close(linger=1000)
            if self._shared_context is None:
                ctx.term()

    async def _join(self) -> Joined:
        """Connect and say HELLO (see _handshake for what it returns)."""
        self._link.connect(self.identity)
        return await self._handshake()

    async def _serve(self, outbox: Outbox) -> bool:
        """Work for the front until told to stop (False) or, for a remote engine, until
        the front falls silent (True: start over)."""
        tasks = [
            asyncio.create_task(self._heartbeats()),
            asyncio.create_task(outbox.run(self._send)),
        ]
        if self._reconnects:
            tasks.append(asyncio.create_task(self._watch_front()))
        ends = [asyncio.create_task(e.wait()) for e in (self._stop, self._front_silent)]
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        for task in [*tasks, *ends]:
            task.cancel()
        await asyncio.gather(*tasks, *ends, return_exceptions=True)
        return self._front_silent.is_set() and not self._stop.is_set()

    async def _watch_front(self) -> None:
        """A remote engine has no parent to watch: the front PINGs it every heartbeat
        interval, so silence past the liveness it set in WELCOME means it is gone."""
        link = self._link
        while True:
            await asyncio.sleep(link.interval)
            if link.gone():
                log.warning("the front has been silent for %.1f s; engine %s starts over",
                            link.silence(), self.settings.name)  # fmt: skip
                self._front_silent.set()
                return

    async def _start_over(self) -> bool:
        """The front is gone: its jobs end here (their output would reach nobody, or a
        new front that reuses their ids), what waits to be sent is dropped, and the
        engine joins again as a new incarnation. Loaded models stay loaded. False when
        the scheduler did not end its jobs in time (the engine then exits)."""
        self._link.close()  # nothing more comes in, nothing more goes out
        ended = threading.Event()
        self.scheduler.cancel_all(ended)
        if not await asyncio.to_thread(ended.wait, START_OVER_TIMEOUT):
            log.error("engine %s could not end its jobs in %.0f s; it exits",
                      self.settings.name, START_OVER_TIMEOUT)  # fmt: skip
            self._exit_code = EXIT_SCHEDULER_CRASHED
            return False
        self._outbox.clear()  # their DONEs were published before `ended` was set
        self._front_silent.clear()
        self._new_incarnation()
        return True

    def _new_incarnation(self) -> None:
        self._link.close()
        self.settings = dataclasses.replace(self.settings, epoch=next_epoch(self.settings.epoch))
        self.identity = self._identity()

    @property
    def _link(self) -> BusLink:
        assert self._bus is not None, "run() makes the link before it is used"
        return self._bus

    @property
    def _socket(self) -> LoopSocket:
        return self._link.socket

    def _identity(self) -> bytes:
        """name:epoch; a remote engine's adds a random part, so that no other key can
        take its routing id over from what /healthz shows (see the front's HELLO)."""
        base = f"{self.settings.name}:{self.settings.epoch}"
        return (f"{base}:{secrets.token_hex(8)}" if self.settings.curve else base).encode()

    async def _stops_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()
        return self._stop.is_set()

    def request_stop(self) -> None:
        """From another thread: leave the bus and end run()."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._stop.set)

    def _schedule(self) -> None:
        try:
            self.scheduler.run()
        except BaseException:
            # a dead decode loop with a live socket would accept jobs and never end them
            log.exception("the scheduler thread crashed; engine %s exits", self.settings.name)
            self._exit_code = EXIT_SCHEDULER_CRASHED
            self.request_stop()

    async def _send(self, frames: list[bytes]) -> None:
        await self._socket.send(frames)

    async def _handshake(self) -> Joined:
        """HELLO, then WELCOME (joined), REFUSE (told why), no answer in time (late), or a
        stop asked for meanwhile."""
        hello = Hello(
            name=self.settings.name,
            epoch=self.settings.epoch,
            pid=os.getpid(),
            backend=self.settings.backend,
            capabilities=self.capabilities,
            slots=self.settings.slots,
            token=self.settings.token,
            gpus=self.settings.gpus,
        )
        msg = await self._link.hello(encode(hello), HANDSHAKE_TIMEOUT, self._stop)
        # A WELCOME wins over a stop read with it (a front that welcomes and at once
        # says SHUTDOWN): the engine has joined, so it leaves with a BYE.
        if msg is None:
            if self._stop.is_set():
                return Joined.STOPPED  # told to stop while joining: leave, as asked
            log.error("no WELCOME from the front within %.0f s", HANDSHAKE_TIMEOUT)
            return Joined.LATE
        if isinstance(msg, Refuse):
            log.error("front refused engine %s: %s", self.settings.name, msg.reason)
            return Joined.REFUSED
        log.info("engine %s joined the bus", self.settings.name)
        return Joined.JOINED

    def _decode(self, frames: list[bytes]) -> Message | None:
        try:
            return decode(frames)
        except BusProtocolError as exc:
            self.dropped_frames += 1
            self._drop_log.warning(
                "dropped a malformed bus frame (%d so far): %s", self.dropped_frames, exc
            )
            return None

    def _on_frames(self, frames: list[bytes]) -> None:
        """Every message from the front, on the loop's thread."""
        self._link.heard()  # any frame, a malformed one too: the front is there
        msg = self._decode(frames)
        if self._link.joining:
            if isinstance(msg, Welcome):
                # now, not when the handshake resumes: the JOBs that follow the WELCOME
                # may be handled first, and they were dispatched within its slots
                self._configure(msg.config)
            if isinstance(msg, Welcome | Refuse):
                self._link.answered(msg)
            return
        if msg is None:
            self._fail_unreadable_job(frames)
        elif isinstance(msg, Job):
            self.scheduler.submit(msg)
        elif isinstance(msg, Cancel):
            self._outbox.resume(msg.job_id)  # its last output and DONE may leave
            self.scheduler.cancel(msg.job_id)
        elif isinstance(msg, Hold):
            if self.scheduler.running(msg.job_id):  # a late HOLD would be kept for ever
                self._outbox.hold(msg.job_id)
                self.scheduler.hold(msg.job_id)
        elif isinstance(msg, Resume):
            self._outbox.resume(msg.job_id)
            self.scheduler.resume(msg.job_id)
        elif isinstance(msg, Ping):
            if msg.ref != KEEPALIVE:  # a keepalive only says the front is there
                self._socket.send_nowait(encode(self._heartbeat()))  # a lost reply is just late
        elif isinstance(msg, Control):
            self._control(msg)
        elif isinstance(msg, Refuse):
            log.error("front refused engine %s: %s", self.settings.name, msg.reason)
            self._exit_code = EXIT_REFUSED
            self._stop.set()

    def _fail_unreadable_job(self, frames: list[bytes]) -> None:
        """A JOB that fails validation still ends with FAIL when its id can be read, so
        the front never waits for a job this engine will not run (invariant 2)."""
        job_id = unreadable_job_id(frames)
        if job_id is not None:
            fail = encode(Fail(job_id, FailKind.BAD_JOB, "the JOB message is malformed"))
            task = asyncio.get_running_loop().create_task(self._send(fail))
            self._sending.add(task)  # keep a reference until it is sent
            task.add_done_callback(self._sending.discard)

    def _control(self, msg: Control) -> None:
        model = msg.args.get("model")
        if msg.action == ControlAction.SHUTDOWN:
            self._stop.set()
        elif msg.action == ControlAction.LOAD and isinstance(model, dict):
            try:
                self.scheduler.preload(ModelSpec.parse(model))
            except BusProtocolError as exc:
                self._drop_log.warning("dropped a CONTROL load: %s", exc)
        elif msg.action == ControlAction.UNLOAD and isinstance(model, str):
            self.scheduler.unload(model)
        elif msg.action == ControlAction.CONFIG:
            self._configure(msg.args)
        elif msg.action == ControlAction.RECONNECT and self._reconnects:
            log.info("engine %s starts over, as its front asks", self.settings.name)
            self._front_silent.set()
        else:
            self._drop_log.warning("dropped a CONTROL %r with args %r", msg.action, msg.args)

    def _configure(self, settings: dict[str, Any]) -> None:
        """The front's settings for this engine (WELCOME, CONTROL config), in order with
        the jobs around them: the scheduler applies them from the same queue."""
        try:
            config = EngineConfig.parse(settings)
        except BusProtocolError as exc:
            self._drop_log.warning("the front's settings are malformed (%s); ignored", exc)
            return
        self.scheduler.configure(config)
        if config.thermal is not None:
            self._thermal = ThermalPolicy.from_settings(config.thermal)

    def _heartbeat(self) -> Heartbeat:
        snapshot = self.scheduler.pool.snapshot
        taken, holds = self.scheduler.holds
        loading = snapshot.progress()
        for model_id, fraction in loading.items():
            log.info("loading model %s: %d%%", model_id, fraction * 100)
        return Heartbeat(
            state=EngineState.LOADING if loading else EngineState.READY,
            loaded=list(snapshot.loaded),
            loading=loading,
            rss=self._proc.memory_info().rss,
            models=self.scheduler.stats,
            cooldown=self._cooldown.public() if self._cooldown is not None else None,
            gpus={card: reading.public() for card, reading in self._readings.gpus.items()},
            residents=self.scheduler.residents_now(),
            wants_mb=0.0 if self._room is None else self._room.wants_mb,
            room_mb=None if self._room is None else self._room.room_mb,
            coming_mb=0.0 if self._room is None else self._room.coming_mb,
            measures=self._measures,
            kernels={k: v for b in self._backends.values() for k, v in b.facts().items()},
            holds={model: report.names for model, report in holds.items()},
            holds_cut=[model for model, report in holds.items() if report.cut],
            taken=taken,
        )

    async def _check_thermal(self) -> None:
        """Read the sensors (off the loop: NVML and sysfs calls block) and pause or go
        on as the readings say."""
        self._readings = await asyncio.to_thread(self._sensors.read)
        before = self._cooldown
        after = next_cooldown(before, self._readings, self._thermal, time.time())
        self._cooldown = after
        if (before is None) == (after is None):
            return
        self.scheduler.cool(after is not None)
        if after is not None:
            part = "the CPU" if after.sensor == "cpu" else f"GPU {after.card}"
            log.warning(
                "engine %s pauses to cool: %s is at %.0f °C (pauses at %.0f, goes on at %.0f)",
                self.settings.name, part, after.temp, after.high, after.resume,
            )  # fmt: skip
        elif before is not None:
            log.info("engine %s goes on: cooled below %.0f °C", self.settings.name, before.resume)

    async def _heartbeats(self) -> None:
        while True:
            if self._front_gone():
                log.error(
                    "front process %s is gone; engine %s exits",
                    self.settings.front_pid,
                    self.settings.name,
                )
                self._exit_code = EXIT_FRONT_GONE
                self._stop.set()
                return
            await self._check_thermal()
            cap = self.scheduler.pool.ram_cap_bytes
            if cap:
                fleet = await asyncio.to_thread(fleet_usage, self.settings.front_pid)
                self.scheduler.measured(fleet)
                # the pool's state is read after the measure: a load begun before it is in
                # the state (counted for what it has yet to take), one begun after counts
                # whole and is in no RSS yet. All is assigned together after the await, so
                # a PING answered meanwhile repeats the last measure whole, with its count
                wants_mb, footprint = self.scheduler.pool.room_state
                coming = still_to_load(footprint, self._proc.memory_info().rss)
                self._room = FleetRoom((cap - sum(fleet.values())) / MIB, coming / MIB, wants_mb)
                self._measures += 1
            else:
                self._room = None
            await self._send(encode(self._heartbeat()))
            await asyncio.sleep(self._link.interval)

    def _front_gone(self) -> bool:
        # an orphan is re-parented: never keep holding GPU memory for a dead front
        return self.settings.front_pid is not None and os.getppid() != self.settings.front_pid
