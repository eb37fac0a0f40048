"""The front's side of the bus: one ROUTER socket, the engine registry, the job table and
the queue of jobs waiting for credit. Everything here runs on the front's event loop, which
is the only owner of the socket and of this state.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import zmq

from coderai.bus.checker import (
    cooldown_of,
    gpu_readings,
    holds_of,
    is_number,
    kernels_of,
    model_counters,
    offered_models,
    residents_of,
)
from coderai.bus.codec import decode, encode
from coderai.bus.kinds import ControlAction, EngineState, FailKind, JobKind
from coderai.bus.loop_socket import LoopSocket
from coderai.bus.messages import (
    KEEPALIVE,
    Bye,
    Cancel,
    Chunks,
    Control,
    Done,
    Embeddings,
    Fail,
    Heartbeat,
    Hello,
    Hold,
    Message,
    Ping,
    Prompt,
    Refuse,
    Resume,
    Tokens,
    Welcome,
)
from coderai.bus.sockets import bind_router
from coderai.common.exits import exit_words
from coderai.common.logthrottle import ThrottledLog
from coderai.config import ServerConfig
from coderai.errors import (
    BusProtocolError,
    CoderaiError,
    EngineFailed,
    InvalidRequest,
    NoEngine,
    ProtocolVersionMismatch,
    QueueFull,
    ShuttingDown,
    StreamStalled,
)
from coderai.front.dispatch import admission, output
from coderai.front.dispatch.deaths import Death, asked_to_load, down, engine_doing, job_doing
from coderai.front.dispatch.idle import NEVER, IdleKeeper
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.placement import compatible, route
from coderai.front.dispatch.queue import JobQueue
from coderai.front.dispatch.registry import EngineRecord, Offered, Registry, RemoteEngine
from coderai.front.dispatch.replicas import Replica, ReplicaRouter, Went
from coderai.front.dispatch.room import RoomKeeper
from coderai.front.engines.host import EngineHost, Unhosted

if TYPE_CHECKING:  # handed in by server.py; front/cluster/ imports the dispatcher
    from coderai.front.cluster.router import ClusterRouter

log = logging.getLogger("coderai.front")

_ENGINE_STATES = frozenset(EngineState)
#: heartbeats an engine may miss before it is "missing" and PINGed
MISSING_AFTER_BEATS = 2


class Dispatcher:
    def __init__(
        self,
        settings: ServerConfig,
        endpoint: str,
        token: str,
        host: EngineHost | None = None,
        engine_config: Callable[[str], dict[str, Any]] = lambda name: {},
        preloads: Callable[[EngineRecord], list[dict[str, Any]]] = lambda engine: [],
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        cluster: ClusterRouter | None = None,
        remote_engines_changed: Callable[[dict[str, RemoteEngine]], None] = lambda e: None,
        keep_alive_of: Callable[[str], float] = lambda model: NEVER,
        kept_loaded: Callable[[str], bool] = lambda model: False,
    ) -> None:
        #: read at each use: a live change of the settings (Front.config) replaces it
        self.settings = settings
        self.endpoint = endpoint
        self._token = token
        #: runs the engines: started and stopped with the bus
        self.host: EngineHost = host or Unhosted()
        #: settings sent in WELCOME and CONTROL config, by engine name
        self.engine_config = engine_config
        #: specs of the models an engine that has just joined should load at once
        self.preloads = preloads
        self.registry = Registry()
        self.queue = JobQueue()
        self._pin_noted: set[tuple[str, str]] = set()
        #: decides the unloads that make room under the fleet's RAM cap
        self._room = RoomKeeper()
        #: decides the unloads of models idle past their keep_alive (seconds, by model
        #: id; read at each pass, so a live change applies at once)
        self.idle = IdleKeeper()
        #: where each conversation of a model with replicas went (cache-aware routing)
        self.replicas = ReplicaRouter()
        self.keep_alive_of = keep_alive_of
        #: whether the catalogue keeps a model loaded (never unloaded for room)
        self.kept_loaded = kept_loaded
        self.dropped_frames = 0
        self._drop_log = ThrottledLog(log)
        #: cleared at shutdown: new requests are refused, those admitted may still finish
        self.accepting = True
        #: set when the bus stops: an engine lost fails its jobs instead of requeueing them
        self.stopping = False
        #: streams whose engine was told to hold them (back-pressure), ever
        self.holds = 0
        #: streams being written to their clients (the handlers add and remove them)
        self.streams: set[FrontJob] = set()
        self._ids = itertools.count(1)
        #: shared with an in-process engine, for inproc://
        self.context: zmq.Context[zmq.Socket[bytes]] = context or zmq.Context()
        self._sock: LoopSocket | None = None
        #: engines and nodes on other machines: TCP with CURVE (None: cluster.bind unset)
        self.cluster = cluster
        self._remote: LoopSocket | None = None
        #: told each remote engine's name and capabilities whenever one joins or leaves
        #: (placement assigns owners, and honours pins, among them too)
        self._remote_engines_changed = remote_engines_changed
        self._tasks: list[asyncio.Task[None]] = []
        #: each engine's last death (how, doing what), by name: kept past its record
        self.deaths: dict[str, Death] = {}
        #: the pid of each engine's last incarnation that joined the bus, by name
        self._joined_pids: dict[str, int] = {}

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        sock = bind_router(self.context, self.endpoint)
        self._sock = LoopSocket(sock, loop, self._take)
        if self.cluster is not None:
            remote = self.cluster.bind(self.context)
            self._remote = LoopSocket(remote, loop, self._take_remote, copy=False)
            log.info("engines on other machines may join at %s (CURVE)", self.cluster.endpoint)
        self._tasks = [asyncio.create_task(self._reap(), name="bus-reaper")]
        self.host.start(self)

    async def shutdown(self, grace: float) -> int:
        """Take no new requests; let those in flight and queued finish for `grace` seconds,
        then end every one left with a 503 (an error event, for a stream that has begun).
        Returns how many were ended that way."""
        self.accepting = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self._unfinished() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        ended = self._end_all(ShuttingDown("the server is shutting down"))
        # a stream whose client is not reading would keep its handler waiting to write:
        # its error event goes into the socket's buffer instead
        for job in list(self.streams):
            if job.writing_since is not None:
                self._interrupt(job)
        return ended

    def _unfinished(self) -> list[FrontJob]:
        running = [j for e in self.registry.all() for j in e.jobs.values()]
        return [j for j in [*self.queue, *running] if j.outcome is None]

    def _end_all(self, error: CoderaiError) -> int:
        ended = 0
        for job in self.queue.clear():
            ended += job.outcome is None
            job.finish(error)
        for record in self.registry.all():
            for job in list(record.jobs.values()):
                if job.outcome is None:
                    ended += 1
                    self._end(job, error, record)
        return ended

    def _end(self, job: FrontJob, error: CoderaiError, engine: EngineRecord | None) -> None:
        """The front answers a dispatched job itself: its engine is told to stop, and what
        it still sends for the job is dropped (it is never run again elsewhere). The job
        keeps its engine's credit until the engine confirms with DONE or FAIL."""
        job.finish(error, engine.name if engine else None)
        job.abandoned = True
        if engine is not None:
            self._send(engine, Cancel(job.id))

    def _interrupt(self, job: FrontJob) -> None:
        """Stop a stream's handler waiting on a client that does not read: it leaves its
        last event in the socket's buffer and closes the connection."""
        if job.writer is not None and not job.interrupted:
            job.interrupted = True
            job.writer.cancel()

    async def stop(self) -> None:
        await self.host.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # with `stopping` set, nothing is queued again or dispatched from here on
        self.accepting, self.stopping = False, True
        self._end_all(ShuttingDown("the server is shutting down"))
        for record in self.registry.all():
            self._lose(record, "the server is shutting down", died=False)
        for sock in (self._sock, self._remote):
            if sock is not None:
                sock.close()
        if self.cluster is not None:
            self.cluster.stop()
        self.context.term()

    def next_job_id(self) -> int:
        return next(self._ids)

    # -- requests -------------------------------------------------------------------------
    def submit(self, job: FrontJob) -> None:
        """Dispatch now, or queue; raises NoEngine, QueueFull or InvalidRequest for an
        immediate answer. The JOB is encoded first, so a job that cannot cross the bus is
        refused before any engine's credit is spent on it."""
        if not self.accepting:
            raise ShuttingDown("the server is shutting down")
        try:
            job.frames = encode(job.message)
        except (OverflowError, UnicodeEncodeError, TypeError, ValueError) as exc:
            raise InvalidRequest(f"the request holds a value that cannot be sent: {exc}") from None
        engines = self.serving()
        if not compatible(job.capability, engines) and not self._engines_starting():
            raise self._no_engine(job.capability, bool(engines))
        if not self.queue.waiting_for(job.entry.id):
            engine = self._place(job)
            if engine is not None:
                self._dispatch_placed(job, engine)
                return
        if len(self.queue) >= self.settings.max_queue:
            raise QueueFull(
                f"all engines are busy and {len(self.queue)} requests are queued; retry later",
                retry_after=self.settings.retry_after,
            )
        self.queue.append(job)

    async def drain(self, name: str, grace: float) -> int:
        """Stop giving an engine jobs, let its running ones finish for `grace` seconds,
        then cancel the rest with an error. Returns how many were cancelled."""
        record = self.registry.by_name(name)
        if record is None:
            return 0
        record.draining = True
        self._pump()  # queued jobs for this engine's models go elsewhere
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while record.jobs and loop.time() < deadline:
            await asyncio.sleep(0.05)
        cancelled = 0
        for job in list(record.jobs.values()):
            if job.outcome is None:
                cancelled += 1
                error = EngineFailed(f"engine {name} was drained before this request ended")
                self._end(job, error, record)
        return cancelled

    def control(self, engine: EngineRecord, action: str, args: dict[str, Any]) -> None:
        self._send(engine, Control(next(self._ids), action, args))
        model = args.get("model")
        if action == ControlAction.LOAD and isinstance(model, dict):
            engine.asked_to_load[str(model.get("id"))] = time.monotonic()

    def configure_engines(self) -> None:
        """The engines' settings changed: each engine on the bus is sent its own, and its
        credit follows. The engine reads the CONTROL before any JOB sent after it, so a
        raised credit is never spent before the engine knows it; a lowered one stops new
        dispatches at once and lets the jobs running there finish."""
        for record in self.registry.all():
            settings = self._settings_for(record.name, record.own_slots)
            self.control(record, ControlAction.CONFIG, settings)
            record.slots = settings.get("slots", record.slots)
        self._pump()  # more credit may take queued jobs now

    def _settings_for(self, name: str, own_slots: int | None) -> dict[str, Any]:
        """An engine's settings. A remote engine or node runs as many requests as it
        said it can (a node: the sum of its engines), unless this front's config names
        it in server.max_parallel_requests_overrides."""
        settings = self.engine_config(name)
        if own_slots is not None and name not in self.settings.max_parallel_requests_overrides:
            settings = {**settings, "slots": own_slots}
        return settings

    def engine_of(self, job: FrontJob) -> EngineRecord | None:
        """The engine running a job, if it was dispatched and has not ended there. The
        engine's record is the one place that says so; engines are few, so a scan is cheap
        and nothing else has to be kept in step with it."""
        for record in self.registry.all():
            if record.jobs.get(job.id) is job:
                return record
        return None

    def cancel(self, job: FrontJob) -> None:
        """The client went away: forget a queued job, or tell its engine to stop."""
        if job.outcome is not None:
            return
        job.abandoned = True
        engine = self.engine_of(job)
        if engine is None:
            self.queue.remove(job)
            return
        self._send(engine, Cancel(job.id))

    def _hold(self, engine: EngineRecord, job: FrontJob) -> None:
        """The stream's client lags by more than stream_backlog_chars: its engine stops
        that sequence until the client has taken what waits for it."""
        if not job.held and job.outcome is None:
            job.held = True
            self.holds += 1
            self._send(engine, Hold(job.id))

    def hold(self, job: FrontJob) -> None:
        """Hold a job whose reader lags (a node's head said so)."""
        engine = self.engine_of(job)
        if engine is not None:
            self._hold(engine, job)

    def resume(self, job: FrontJob) -> None:
        if job.held:
            job.held = False
            engine = self.engine_of(job)
            if engine is not None and job.outcome is None:
                self._send(engine, Resume(job.id))

    def _end_stalled(self, now: float) -> None:
        """Streams whose write has waited past stream_stall_timeout: the client stopped
        reading. Each ends with an error, its slot is freed, and its handler is interrupted
        to leave the error event in the socket's buffer and close the connection."""
        limit = self.settings.stream_stall_timeout
        for job in list(self.streams):
            since = job.writing_since
            if since is None or job.interrupted or now - since <= limit:
                continue
            log.info("request %d: its client read nothing for %.0f s; ending it", job.id, limit)
            if job.outcome is None:
                error = StreamStalled(f"the client read nothing for {limit:.0f} s")
                self._end(job, error, self.engine_of(job))
            self._interrupt(job)

    def _engines_starting(self) -> bool:
        """Engine processes alive that have not said HELLO yet: they may serve soon."""
        return bool(self.host.joinable() - {e.name for e in self.registry.all()})

    def serving(self) -> list[EngineRecord]:
        """Engines that take new jobs."""
        return [e for e in self.registry.all() if not e.draining]

    def _place(self, job: FrontJob) -> EngineRecord | None:
        """The engine to dispatch to now, or None to wait for one's credit."""
        serving = {e.name: e for e in self.serving()}
        able = [serving[n] for n in job.replicas
                if n in serving and job.capability in serving[n].capabilities]  # fmt: skip
        if len(able) > 1:
            if not any(e.free for e in able):
                return None  # every replica is full: nothing to choose yet
            model = job.entry.id
            replicas = [Replica(e.name, len(e.jobs), e.free, job.affinity in e.holds.get(model, ()),
                                e.holds_count if e.names_all(model) else None, e.epoch)
                        for e in able]  # fmt: skip
            settings = self.settings
            chosen_replica = self.replicas.pick(
                settings.routing, settings.routing_load_bound, model, job.affinity, replicas
            )
            # where any has room, each policy chooses one that has (replicas.choose)
            assert chosen_replica.free, "a replica with room was passed over"
            return serving[chosen_replica.name]
        if able:  # one replica serves: it owns the model while the others are away
            job.owner = able[0].name
        return self._place_owned(job, serving)

    def _place_owned(self, job: FrontJob, serving: dict[str, EngineRecord]) -> EngineRecord | None:
        chosen = route(
            job.capability,
            job.entry.id,
            job.owner,
            self.settings.default_engine,
            [e.candidate() for e in serving.values()],
        )
        if chosen is None:
            return None
        target = serving[chosen.name]
        pin = job.entry.engine
        if pin is not None and target.name != pin and (job.entry.id, pin) not in self._pin_noted:
            # one line per model and engine, however many requests follow
            self._pin_noted.add((job.entry.id, pin))
            log.warning(
                "model %s is pinned to engine %s, which cannot serve it now; using %s",
                job.entry.id, pin, target.name,
            )  # fmt: skip
        return target if target.free else None

    def _dispatch_placed(self, job: FrontJob, engine: EngineRecord) -> None:
        """Dispatch a job where _place chose: a conversation's replica is remembered."""
        sent_as = self._dispatch(job, engine)
        if job.replicas:
            went = Went(engine.name, engine.epoch, sent_as)
            self.replicas.dispatched(job.entry.id, job.affinity, went)

    def _dispatch(self, job: FrontJob, engine: EngineRecord) -> int:
        """Send a job's JOB to an engine: the number it went to that engine as."""
        engine.jobs[job.id] = job
        job.dispatched = True
        job.wake.set()  # a stream waiting to open may now (stream_io.open_stream)
        self._send_frames(engine, job.frames)
        return engine.sending(job.id)

    def _pump(self) -> None:
        """Dispatch queued jobs to free credit, in the queue's fair-share order (each
        tenant's in arrival order) per model."""
        if self.stopping:
            return
        blocked: set[str] = set()
        for job in self.queue:
            if not any(e.free for e in self.serving()):
                return
            if job.entry.id in blocked:
                continue
            engine = self._place(job)
            if engine is None:
                blocked.add(job.entry.id)
                continue
            self.queue.dispatched(job)
            self._dispatch_placed(job, engine)

    def _send(self, engine: EngineRecord, msg: Message) -> None:
        self._send_frames(engine, encode(msg))

    def _send_frames(self, engine: EngineRecord, frames: list[bytes]) -> None:
        """Never raises: a peer that cannot be reached is lost (its jobs run elsewhere or
        fail), which is handled outside whichever bus callback tried to send."""
        if engine.remote_key is not None and not self._still_allowed(engine):
            return  # revoked: nothing more goes to it (the reaper cuts it off)
        sock = self._remote if engine.remote_key is not None else self._sock
        assert sock is not None
        error = sock.send_nowait([engine.identity, *frames])
        if error is not None:
            # ROUTER_MANDATORY: the peer is gone (or hopelessly backed up)
            log.warning("cannot reach engine %s (%s); treating it as lost", engine.name, error)
            # not counted as a death: the job never reached it, so it is not to blame
            asyncio.get_running_loop().call_soon(self._lose, engine, "engine unreachable", False)

    # -- the bus --------------------------------------------------------------------------
    def _take(self, frames: list[bytes]) -> None:
        self._take_from(frames, None)

    def _take_remote(self, frames: list[zmq.Frame]) -> None:
        """A message on the CURVE socket, with the key its peer proved (ZAP let it in)."""
        try:
            key = frames[-1].get("User-Id")
        except zmq.ZMQError:
            key = None
        if not isinstance(key, str) or not key:  # ZAP always names the key; never seen
            self._drop(frames[0].bytes, BusProtocolError("a CURVE message without its key"))
            return
        self._take_from([f.bytes for f in frames], key)

    def _take_from(self, frames: list[bytes], key: str | None) -> None:
        try:
            self._handle(frames[0], frames[1:], key)
        except BusProtocolError as exc:
            self._drop(frames[0], exc, key)
        except Exception:  # invariant 4: one bad message never stops the bus loop
            log.exception("error handling a bus message from %r", frames[0])
            self.dropped_frames += 1

    def _drop(self, identity: bytes, exc: BusProtocolError, key: str | None = None) -> None:
        self.dropped_frames += 1
        # throttled: a flood of bad frames must not become a flood of log lines
        self._drop_log.warning(
            "dropped a bus frame from %r (%d so far): %s", identity, self.dropped_frames, exc
        )
        if isinstance(exc, ProtocolVersionMismatch):
            self._refuse(identity, exc.message, key)

    def _refuse(self, identity: bytes, reason: str, key: str | None = None) -> None:
        sock = self._remote if key is not None else self._sock
        assert sock is not None
        error = sock.send_nowait([identity, *encode(Refuse(reason))])
        if error is not None:
            log.info("could not tell %r why it was refused: %s", identity, error)

    def _handle(self, identity: bytes, frames: list[bytes], key: str | None = None) -> None:
        if key is not None and self.cluster is not None and key not in self.cluster.allowed:
            raise BusProtocolError(f"a message from a revoked key {key}")
        msg = decode(frames)
        record = self.registry.get(identity)
        if record is not None and record.remote_key != key:
            if key is not None and record.remote_key is not None:
                # another key connected under this engine's routing id: the engine's own
                # connection is gone (the ROUTER refuses a second one), and what is sent
                # to this id now reaches the other key's peer
                self._lose(record, "lost its routing id to another key")
            record = None  # one peer's identity claimed on the other socket, or by another key
        if isinstance(msg, Hello):
            self._hello(identity, msg, key)
            return
        if record is None:
            raise BusProtocolError(f"{type(msg).__name__} from a peer that has not said HELLO")
        record.last_seen = time.monotonic()
        record.missing = False
        if isinstance(msg, Chunks):
            self._chunks(record, msg.deltas)
        elif isinstance(msg, Embeddings):
            job = record.jobs.get(msg.job_id)
            if job is not None:
                job.vectors = msg.vectors
        elif isinstance(msg, Tokens):
            if not all(type(token) is int for token in msg.ids):
                raise BusProtocolError("TOKENS ids must be integers")
            job = record.jobs.get(msg.job_id)
            if job is not None:
                job.tokens = msg
        elif isinstance(msg, Prompt):
            job = record.jobs.get(msg.check().job_id)
            if job is not None and not job.abandoned:
                job.prompted(record.name, msg)
        elif isinstance(msg, Done):
            self._ended(record, msg.job_id, msg)
        elif isinstance(msg, Fail):
            self._failed(record, msg)
        elif isinstance(msg, Heartbeat):
            self._heartbeat(record, msg)
        elif isinstance(msg, Bye):
            log.info("engine %s said goodbye: %s", record.name, msg.reason)
            self._lose(record, f"engine {record.name} left: {msg.reason}", died=False)

    def _heartbeat(self, record: EngineRecord, msg: Heartbeat) -> None:
        """Every field checked before any is kept: a malformed heartbeat changes nothing."""
        if msg.state not in _ENGINE_STATES:
            raise BusProtocolError(f"HEARTBEAT.state {msg.state!r} is not an engine state")
        models = model_counters(msg.models)
        cooldown = cooldown_of(msg.cooldown)
        readings = gpu_readings(msg.gpus)
        residents = residents_of(msg.residents)
        kernels = kernels_of(msg.kernels)
        holds, cut, taken = holds_of(msg.holds, msg.holds_cut, msg.taken)
        for name in ("wants_mb", "coming_mb", "rss"):
            if not is_number(getattr(msg, name), 0):
                raise BusProtocolError(f"HEARTBEAT.{name} {getattr(msg, name)!r} is not a size")
        if msg.room_mb is not None and not is_number(msg.room_mb):
            raise BusProtocolError(f"HEARTBEAT.room_mb {msg.room_mb!r} is not a number")
        if type(msg.measures) is not int or msg.measures < 0:
            raise BusProtocolError(f"HEARTBEAT.measures {msg.measures!r} is not a count")
        if not all(isinstance(m, str) for m in msg.loaded) or not all(
            isinstance(m, str) and is_number(f, 0) for m, f in msg.loading.items()
        ):
            raise BusProtocolError("HEARTBEAT.loaded and .loading must name models")
        record.models, record.cooldown, record.gpu_readings = models, cooldown, readings
        record.residents, record.residents_at = residents, record.last_seen
        record.wants_mb, record.coming_mb = float(msg.wants_mb), float(msg.coming_mb)
        record.room_mb = None if msg.room_mb is None else float(msg.room_mb)
        record.measures = msg.measures
        record.state = msg.state
        record.loaded = msg.loaded
        record.loading = msg.loading
        record.asked_to_load = asked_to_load(
            record.asked_to_load, msg.loaded, msg.loading, record.last_seen,
            self.settings.heartbeat_interval,
        )  # fmt: skip
        record.rss = int(msg.rss)
        record.kernels = kernels
        record.told_holds(holds, cut, taken)

    def _hello(self, identity: bytes, msg: Hello, key: str | None = None) -> None:
        if key is None and not admission.token_matches(msg.token, self._token):
            self._drop(identity, BusProtocolError(f"HELLO from {msg.name!r} with a wrong token"))
            self._refuse(identity, "wrong bus token")
            return
        if not admission.identity_matches(identity, msg, remote=key is not None):
            self._refuse(identity, "identity does not match name:epoch", key)
            return
        why = self._name_refused(msg.name, key, msg.pid)
        if why is not None:
            self._drop(identity, BusProtocolError(f"HELLO from {msg.name!r}: {why}"), key)
            self._refuse(identity, why, key)
            return
        try:  # only a node on another machine offers models of its own
            models = offered_models(msg.models) if key is not None else []
            offered = tuple(Offered(m["id"], m["format"], m.get("alias")) for m in models)
        except BusProtocolError as exc:
            self._drop(identity, exc, key)
            self._refuse(identity, str(exc), key)
            return
        own_slots = admission.own_slots(key, msg.slots)
        settings = self._settings_for(msg.name, own_slots)
        record = EngineRecord(
            identity=identity,
            name=msg.name,
            epoch=msg.epoch,
            pid=msg.pid,
            backend=msg.backend,
            capabilities=frozenset(msg.capabilities),
            # the slots configured now, which the WELCOME gives it: it was started with
            # those in force then, and they may have changed since
            slots=max(1, settings.get("slots", msg.slots)),
            gpus=msg.gpus,
            remote_key=key,
            offered=offered,
            own_slots=own_slots,
        )
        previous = self.registry.add(record)
        self._joined_pids[msg.name] = msg.pid
        if previous is not None:
            self._lose(previous, "was replaced by a new incarnation")
        if key is not None:
            self._remote_engines_changed(self._remote_engines())
        welcome = Welcome(
            self.settings.heartbeat_interval, self.settings.heartbeat_liveness, settings
        )
        self._send(record, welcome)
        log.info(
            "engine %s (pid %d, %s) joined with %d slots, capabilities %s",
            msg.name, msg.pid, msg.backend, record.slots, ",".join(msg.capabilities),
        )  # fmt: skip
        self.host.joined(record.name, record.pid)
        for spec in self.preloads(record):
            log.info("asking engine %s to load %s now", record.name, spec.get("id"))
            self.control(record, ControlAction.LOAD, {"model": spec})
        self._pump()

    def _name_refused(self, name: str, key: str | None, pid: int = 0) -> str | None:
        current = self.registry.by_name(name)
        allowed = self.cluster.allowed if self.cluster is not None else None
        current_alive = current is not None and self._alive(current)
        return admission.name_refused(
            name, key, pid, current, allowed, self.host.names(), current_alive
        )

    def _alive(self, record: EngineRecord) -> bool:
        return admission.alive(record, time.monotonic(), self.settings.heartbeat_interval)

    def _remote_engines(self) -> dict[str, RemoteEngine]:
        return {
            r.name: RemoteEngine(r.capabilities, r.offered)
            for r in self.registry.all()
            if r.remote_key is not None
        }

    def _still_allowed(self, record: EngineRecord) -> bool:
        allowed = self.cluster.allowed if self.cluster is not None else None
        return admission.still_allowed(record.remote_key, allowed)

    def cut_off(self) -> None:
        """Engines whose key is no longer allowed: refused (they exit) and lost, their
        jobs run elsewhere or fail; anything more they send is dropped (the key is
        checked on every message), and nothing more is sent to them."""
        for record in self.registry.all():
            if record.remote_key is not None and not self._still_allowed(record):
                log.warning("engine %s: its key was revoked; cutting it off", record.name)
                self._refuse(record.identity, "this engine's key was revoked", record.remote_key)
                self._lose(record, f"engine {record.name}'s key was revoked", died=False)

    def _chunks(self, record: EngineRecord, deltas: list[object]) -> None:
        if len(deltas) % 2:
            raise BusProtocolError("CHUNKS deltas must pair job ids with texts")
        jobs = record.jobs
        # read whole before any of it is applied: a delta that cannot be read ends its
        # own job with an error and none of that job's text is taken, while the other
        # jobs' deltas in the message are kept (dropping them would leave silent gaps in
        # their answers). Found by tests/unit/front/dispatch/test_bus_stateful.py.
        live: list[tuple[FrontJob, Any]] = []
        unreadable: dict[FrontJob, str] = {}
        it = iter(deltas)
        for job_id, text in zip(it, it, strict=True):
            job = jobs.get(job_id)  # type: ignore[call-overload]
            if job is None or job.abandoned:
                continue
            if not (job.raw or isinstance(text, str)):
                try:
                    # a chat job's model may reason: its thinking comes apart from its text
                    if not (job.structured or job.message.kind == JobKind.CHAT):
                        raise BusProtocolError(f"CHUNKS text for job {job_id} is not a string")
                    text = output.pieces(text)
                except BusProtocolError as exc:
                    unreadable[job] = exc.message
                    continue
            live.append((job, text))
        backlog = self.settings.stream_backlog_chars
        for job, text in live:
            if job in unreadable:
                continue
            if job.raw:  # relayed as is to this node's head, which checks it
                waiting = job.push_raw(record.name, text)
            elif isinstance(text, str):
                waiting = job.push(record.name, text)
            else:
                waiting = job.push_pieces(record.name, text)
            # only a stream's client can lag: a whole response takes all as it comes
            if waiting > backlog and job.writer is not None and not job.held:
                self._hold(record, job)
        for job, why in unreadable.items():
            self._drop(record.identity, BusProtocolError(why), record.remote_key)
            self._end(job, EngineFailed(f"engine {record.name} sent output that could not"
                                        f" be read: {why}"), record)  # fmt: skip

    def _ended(self, record: EngineRecord, job_id: int, outcome: Done) -> None:
        job = record.jobs.pop(job_id, None)
        if job is not None:
            self.idle.used(record, job.entry.id, time.monotonic())
            job.finish(outcome, record.name)
        self._pump()

    def _failed(self, record: EngineRecord, msg: Fail) -> None:
        job = record.jobs.pop(msg.job_id, None)
        if job is not None:
            self.idle.used(record, job.entry.id, time.monotonic())
            kind = FailKind.of(msg.kind)
            if kind.retryable and not (job.started or job.abandoned or job.outcome is not None):
                job.dispatched = False
                self.queue.appendleft(job)
            else:
                job.finish(kind.error(record.name, msg.message), record.name)
        self._pump()

    # -- liveness -------------------------------------------------------------------------
    def engine_exited(self, name: str, pid: int | None, code: int | None = None) -> None:
        """The supervisor saw an engine process end (the OS sentinel), with its exit code
        (negative: the signal it died of)."""
        if self._sock is not None:
            # what it sent before it died (its prompt admitted, a load done) says what it
            # was doing: read it before its jobs are judged
            self._sock.drain_now()
        record = self.registry.by_name(name)
        if record is not None and (pid is None or record.pid == pid):
            self._lose(record, exit_words(code))
        elif pid is not None and self._joined_pids.get(name) != pid and code != 0:
            # it never joined the bus: no request ran there, but its death is news
            self.deaths[name] = Death(name, pid, exit_words(code),
                                      "starting, before it joined the bus",
                                      self._planned_capabilities(name))  # fmt: skip
            log.error("%s", self.deaths[name].sentence())

    def _planned_capabilities(self, name: str) -> frozenset[str]:
        status = self.host.statuses().get(name)
        return frozenset(status.capabilities) if status is not None else frozenset()

    def _lose(self, record: EngineRecord, why: str, died: bool = True) -> None:
        """Forget an engine: `why` is how it died (died: "died of SIGILL (illegal
        instruction)"), or why it left. Jobs that produced nothing run elsewhere, once: a
        request that was running on two engines that both died is the likely cause, and
        is not given a third. The rest fail, each saying what the engine was doing for it;
        all fail at shutdown."""
        was_remote = self.registry.get(record.identity) is record and record.remote_key is not None
        if self.registry.get(record.identity) is record:
            self.registry.remove(record)
        jobs, record.jobs = list(record.jobs.values()), {}
        ended = {job.id: f"{why} while running this request" for job in jobs}
        if died:
            doings = [self._doing(record, job) for job in jobs]
            for job, doing in zip(jobs, doings, strict=True):
                ended[job.id] = f"engine {record.name} {why} while {doing}"
            death = Death(record.name, record.pid, why,
                          engine_doing(doings, [*record.loading, *record.asked_to_load]),
                          record.capabilities)  # fmt: skip
            self.deaths[record.name] = death
            log.error("%s", death.sentence())
        requeue = []
        for job in jobs:
            if died:
                job.lost_on.append(record.name)
            if self.stopping or job.started or job.abandoned or job.outcome is not None:
                job.finish(EngineFailed(ended[job.id]), record.name)
            elif len(job.lost_on) > 1:
                log.warning("request %d outlived two engines; not retrying it", job.id)
                job.finish(EngineFailed(
                    f"{ended[job.id]}; it was running on {job.lost_on[0]} when that died"
                    " too, so the request itself is the likely cause and it is not retried"
                ), record.name)  # fmt: skip
            else:
                requeue.append(job)
        for job in reversed(requeue):
            job.held = False
            job.prompt = None  # the next engine reads the prompt anew, and says so
            job.dispatched = False
            self.queue.appendleft(job)
        if requeue:
            log.info("%s: re-dispatching %d jobs that had not started", why, len(requeue))
        if was_remote:
            self._remote_engines_changed(self._remote_engines())
        self._pump()

    @staticmethod
    def _doing(record: EngineRecord, job: FrontJob) -> str:
        prompt = job.prompt.tokens if job.prompt is not None else None
        return job_doing(job.entry.id, job.started, prompt, job.entry.id in record.loaded)

    async def _reap(self) -> None:
        interval = self.settings.heartbeat_interval
        for tick in itertools.count():
            await asyncio.sleep(interval / 2)
            now = time.monotonic()
            if tick % 2:
                # a remote engine has no parent process to watch: these tell it the front
                # is alive, and their absence that it is gone (it then joins again)
                for record in self.registry.all():
                    if record.remote_key is not None:
                        self._send(record, Ping(KEEPALIVE))
            for record in self.registry.all():
                beats = (
                    self.settings.heartbeat_liveness_loading
                    if record.loading
                    else self.settings.heartbeat_liveness
                )
                silence = interval * beats
                quiet = now - record.last_seen
                if quiet > MISSING_AFTER_BEATS * interval and not record.missing:
                    # before it is declared lost: one PING, which it answers at once
                    record.missing = True
                    self._send(record, Ping(next(self._ids)))
                if quiet > silence:
                    log.warning("engine %s missed its heartbeats for %.1f s", record.name, silence)
                    self._lose(record, "stopped responding (it missed its heartbeats)")
                    self.host.kill(record.name, record.pid)
            self._expire_queue(now)
            self._end_stalled(now)
            try:
                self._make_room()
            except Exception:  # the reaper must outlive any one decision's defect
                log.exception("deciding room under the RAM cap failed")
            try:
                self._unload_idle(now, interval)
            except Exception:  # the reaper must outlive any one decision's defect
                log.exception("deciding idle unloads failed")
            if self.cluster is not None:
                try:
                    self.cluster.refresh()  # a stat; the small file is read only on change
                    self.cut_off()
                except Exception:  # the reaper must outlive any one decision's defect
                    log.exception("applying the cluster allow-list failed")

    def _make_room(self) -> None:
        """Loads held back for room under the fleet's RAM cap, or a fleet over it: the
        fleet's least recently used idle models go, on whichever engines hold them."""
        for record, model in self._room.sweep(self.registry.all(), self.kept_loaded):
            log.info("unloading idle %s on %s to make room under the RAM cap", model, record.name)
            self.control(record, ControlAction.UNLOAD, {"model": model})

    def _unload_idle(self, now: float, interval: float) -> None:
        """Models idle past their keep_alive go. One not seen gone after a few heartbeats
        (its engine found it busy) is asked again."""
        engines = [r for r in self.registry.all() if not r.draining]
        for record, model in self.idle.sweep(
            engines, self.keep_alive_of, self.queue.waiting_for, now, again_after=3 * interval
        ):
            log.info("unloading %s on %s: idle for its keep_alive (%g s)",
                     model, record.name, self.keep_alive_of(model))  # fmt: skip
            self.control(record, ControlAction.UNLOAD, {"model": model})

    def _expire_queue(self, now: float) -> None:
        limit = self.settings.queue_timeout
        for job in [j for j in self.queue if now - j.enqueued_at > limit]:
            self.queue.remove(job)
            job.finish(NoEngine(f"no engine could take this request within {limit:.0f} s"))
        self.answer_unservable()

    def answer_unservable(self) -> None:
        """Queued jobs that no serving engine can run, while no engine is on its way (an
        engine that failed to join is not): nothing is coming for them, so answer now
        rather than at queue_timeout."""
        if self.queue and not self._engines_starting():
            # a draining engine counts: its next incarnation (a restart) serves the queue
            registered = self.registry.all()
            for job in [j for j in self.queue if not compatible(j.capability, registered)]:
                self.queue.remove(job)
                job.finish(self._no_engine(job.capability, bool(registered)))

    def _no_engine(self, capability: str, any_running: bool) -> NoEngine:
        """The answer to a request no running engine can serve: where engines that serve
        such models died, which and how (never a bare "no engine" when one crashed)."""
        dead = [
            death
            for name, death in self.deaths.items()
            if capability in death.capabilities and self.registry.by_name(name) is None
        ]
        if dead:
            why = down(dead, self.host.statuses(), time.monotonic())
            return NoEngine(f"no engine that serves {capability!r} models is running: {why}")
        if any_running:
            return NoEngine(f"no running engine can serve {capability!r} models")
        return NoEngine("no engine is running")
