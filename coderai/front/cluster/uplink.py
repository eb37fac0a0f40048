"""A node's uplink (cluster.head): this whole `coderai run` joins a head's cluster bus as
one engine, over CURVE, and runs the head's jobs through its own dispatcher and
placement while it keeps serving its own clients.

To the head it is a remote engine (backend "node"): HELLO with the aggregate of its
engines (node.py), a HEARTBEAT each interval, CHUNKS/DONE/FAIL for each job. Each head
job becomes a local job whose output is kept raw (FrontJob.raw) and relayed as it
arrives by one task per job. Like a remote engine it knows its head only by the head's
messages (PINGs every interval): silence past liveness, or a RECONNECT, ends every
relayed job and joins again as a new incarnation, with back-off; it never exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import zmq
from pydantic import ValidationError

from coderai.bus.checker import MAX_AFFINITY
from coderai.bus.codec import decode, encode, unreadable_job_id
from coderai.bus.curve import load_pair, load_public
from coderai.bus.kinds import ControlAction, FailKind, FinishReason
from coderai.bus.link import BusLink, next_epoch
from coderai.bus.messages import (
    KEEPALIVE,
    Bye,
    Cancel,
    Chunks,
    Control,
    Done,
    Embeddings,
    Fail,
    Hold,
    Job,
    Message,
    ModelSpec,
    Ping,
    Refuse,
    Resume,
    Welcome,
)
from coderai.catalogue.entries import ModelEntry
from coderai.catalogue.file_format import required_capability
from coderai.common.logthrottle import ThrottledLog
from coderai.config import ClusterConfig
from coderai.errors import BusProtocolError, CoderaiError, ConfigError
from coderai.front.api import affinity
from coderai.front.cluster import node
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.engine_view import EngineView
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.engines.plan import EnginePlan

log = logging.getLogger("coderai.front.uplink")

HANDSHAKE_TIMEOUT = 10.0


class NodeUplink:
    def __init__(
        self,
        cluster: ClusterConfig,
        base: Path,
        dispatcher: Dispatcher,
        directory: ModelDirectory,
        plans: list[EnginePlan],
        engines: Callable[[], list[EngineView]],
    ) -> None:
        assert cluster.head and cluster.head_key and cluster.key and cluster.name
        self.head = cluster.head
        self.name = cluster.name
        # keys are read at start: a missing file is a config error, not a retry loop
        try:
            head_key = load_public(base / cluster.head_key)
        except ConfigError as exc:
            raise ConfigError(f"cluster.head_key: {exc}") from None
        try:
            self._curve = (head_key, *load_pair(base / cluster.key))
        except ConfigError as exc:
            raise ConfigError(f"cluster.key: {exc}") from None
        self.dispatcher = dispatcher
        self.directory = directory
        self.plans = plans
        self._engines = engines
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._task: asyncio.Task[None] | None = None
        self._link = BusLink(self._ctx, self.head, self._curve, self._on_frames)
        self._start_over = asyncio.Event()
        self._leave = False
        #: head job id -> the local job that runs it, and the task relaying its output
        self._jobs: dict[int, FrontJob] = {}
        self._relays: dict[int, asyncio.Task[None]] = {}
        #: replies sent from the reader callback, kept until sent
        self._sending: set[asyncio.Task[None]] = set()
        self._drops = ThrottledLog(log)
        self._epoch = int(time.time() * 1000)
        self._process = psutil.Process()
        # what the admin API shows
        self.state = "starting"
        self.joined_at: float | None = None
        self.joins = 0
        self.relayed = 0
        self.last_error: str | None = None
        self.dropped_frames = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="uplink")

    async def stop(self) -> None:
        """Leave the head (BYE), end what runs for it, and close."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._link.connected:
            with contextlib.suppress(zmq.ZMQError):
                self._link.socket.send_nowait(encode(Bye("shutdown")))
        self._end_jobs()
        self._close(linger=500)
        self._ctx.term()

    def status(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "name": self.name,
            "state": self.state,
            "joined_for_s": None
            if self.joined_at is None
            else round(time.monotonic() - self.joined_at, 1),
            "joins": self.joins,
            "running": len(self._jobs),
            "relayed": self.relayed,
            "dropped_frames": self.dropped_frames,
            "last_error": self.last_error,
        }

    # -- joining ------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._leave:
            try:
                if await self._join():
                    await self._serve()
                    log.warning("node %s left head %s: %s", self.name, self.head, self.last_error)
            except Exception as exc:  # a defect here must not end the uplink for good
                log.exception("node %s: the uplink to %s failed", self.name, self.head)
                self.last_error = f"{type(exc).__name__}: {exc}"
            self._end_jobs()
            self._close()
            self.joined_at = None
            if self._leave:
                break
            self.state = "backoff"
            await asyncio.sleep(self._link.backoff())
            self._epoch = next_epoch(self._epoch)
        self.state = "left"

    async def _join(self) -> bool:
        self.state = "joining"
        identity = f"{self.name}:{self._epoch}:{secrets.token_hex(8)}".encode()
        self._start_over.clear()  # before HELLO: a RECONNECT read with the WELCOME stands
        self._link.connect(identity)
        hello = node.hello(self.name, self._epoch, os.getpid(), self.plans,
                           node.offered(self.directory))  # fmt: skip
        answer = await self._link.hello(encode(hello), HANDSHAKE_TIMEOUT)
        if answer is None:
            # CURVE fails silently: a wrong key and no head look the same from here
            self.last_error = (
                f"no WELCOME from {self.head} within {HANDSHAKE_TIMEOUT:.0f} s: is the head"
                " up there, is cluster.head_key its key, and is this node's key allowed"
                " there (coderai cluster list)?"
            )
            self._drops.warning("node %s cannot join: %s", self.name, self.last_error)
            return False
        if isinstance(answer, Refuse):
            self.last_error = f"the head refused this node: {answer.reason}"
            log.error("head %s refused node %s: %s", self.head, self.name, answer.reason)
            return False
        self.state = "joined"
        self.joins += 1
        self.joined_at = time.monotonic()
        log.info("node %s joined head %s", self.name, self.head)
        return True

    async def _serve(self) -> None:
        """Heartbeats until the head falls silent or asks this node to join again. A
        beat never waits for room in the send queue (a lost one is only late): a full
        queue toward a dead head must not keep this loop from noticing the silence."""
        link = self._link
        while not self._start_over.is_set():
            self._beat()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(link.interval):
                    await self._start_over.wait()
            if link.gone():
                self.last_error = f"the head was silent for {link.silence():.1f} s"
                return

    def _beat(self) -> None:
        if self._link.connected:
            self._link.socket.send_nowait(encode(self._heartbeat()))

    def _heartbeat(self) -> Message:
        return node.heartbeat(self._engines(), self._process.memory_info().rss)

    def _close(self, linger: int = 0) -> None:
        self._link.close(linger)

    async def _send(self, msg: Message) -> None:
        """Send, waiting while the head's queue is full; nothing once the socket is gone
        (the head then ends the job itself: it lost this incarnation)."""
        if self._link.connected:
            with contextlib.suppress(zmq.ZMQError):
                await self._link.socket.send(encode(msg))

    def _reply(self, msg: Message) -> None:
        """Send from the reader callback, which cannot wait."""
        task = asyncio.get_running_loop().create_task(self._send(msg))
        self._sending.add(task)  # keep a reference until it is sent
        task.add_done_callback(self._sending.discard)

    # -- the head's messages ------------------------------------------------------------
    def _on_frames(self, frames: list[bytes]) -> None:
        """Every message from the head, on the loop (from the socket's reader): nothing
        may escape, or the reader would stop mid-batch."""
        try:
            self._handle(frames)
        except Exception:
            log.exception("node %s: a message from head %s failed", self.name, self.head)

    def _handle(self, frames: list[bytes]) -> None:
        try:
            msg = decode(frames)
        except BusProtocolError as exc:
            self.dropped_frames += 1
            self._drops.warning("a frame from head %s was dropped: %s", self.head, exc)
            job_id = unreadable_job_id(frames)
            if job_id is not None:
                self._reply(Fail(job_id, FailKind.BAD_JOB, "the JOB message is malformed"))
            return
        self._link.heard()  # a frame that decodes: a head that sends none is silent
        if isinstance(msg, Welcome | Refuse):
            if self._link.joining:
                self._link.answered(msg)
            elif isinstance(msg, Refuse):  # e.g. its key was revoked
                self.last_error = f"the head refused this node: {msg.reason}"
                self._start_over.set()
        elif isinstance(msg, Job):
            self._take(msg)
        elif isinstance(msg, Cancel | Hold | Resume):
            job = self._jobs.get(msg.job_id)
            if job is not None:
                self._steer(msg, job)
        elif isinstance(msg, Ping):
            if msg.ref != KEEPALIVE:  # a question: answered with a heartbeat at once
                self._beat()
        elif isinstance(msg, Control):
            self._control(msg)

    def _steer(self, msg: Cancel | Hold | Resume, job: FrontJob) -> None:
        if isinstance(msg, Hold):
            self.dispatcher.hold(job)
        elif isinstance(msg, Resume):
            self.dispatcher.resume(job)
        else:
            self.dispatcher.cancel(job)
            if job.outcome is None and self.dispatcher.engine_of(job) is None:
                # it was queued here: no engine will confirm, so this node does
                job.finish(Done(job.id, FinishReason.CANCELLED, 0, 0))

    def _control(self, msg: Control) -> None:
        if msg.action == ControlAction.RECONNECT:
            self.last_error = "the head asked this node to join again"
            self._start_over.set()
        elif msg.action == ControlAction.SHUTDOWN:
            self.last_error = "the head asked this node to leave"
            self._leave = True
            self._start_over.set()
        elif msg.action == ControlAction.LOAD:
            self._load(msg.args.get("model"))
        elif msg.action == ControlAction.UNLOAD:
            model = msg.args.get("model")
            if isinstance(model, str):  # wherever it is loaded here
                for record in self.dispatcher.registry.all():
                    if model in record.loaded:
                        self.dispatcher.control(record, ControlAction.UNLOAD, {"model": model})
        # CONFIG: this node's engines run by its own config (its slots were in HELLO)

    def _load(self, model: object) -> None:
        """The head asks for a model now (an admin load, or a preload): this node's
        owner of it loads it, or the first of its engines that can."""
        try:
            entry, local, capability, owner = self._resolve(model)
        except (BusProtocolError, ValidationError, CoderaiError) as exc:
            self._drops.warning("head %s asked to load what cannot load here: %s", self.head, exc)
            return
        able = [r for r in self.dispatcher.serving() if capability in r.capabilities]
        chosen = next((r for r in able if r.name == owner), able[0] if able else None)
        if chosen is None:
            log.warning("head %s asked for %s, which no engine here can load", self.head, entry.id)
            return
        self.dispatcher.control(chosen, ControlAction.LOAD, {"model": local})

    def _take(self, msg: Job) -> None:
        head_id = msg.job_id
        if head_id in self._jobs:
            # a FAIL would end the job that runs under this id on the head's side too
            self._drops.warning("head %s sent job %d twice; ignored", self.head, head_id)
            return
        try:
            job = self._local_job(msg)
            self.dispatcher.submit(job)
        except CoderaiError as exc:  # e.g. no engine here can run it: the head says so
            self._reply(node.fail_of(head_id, exc))
            return
        except (BusProtocolError, ValidationError) as exc:
            self._reply(Fail(head_id, FailKind.BAD_JOB, f"this node cannot run the job: {exc}"))
            return
        self._jobs[head_id] = job
        self._relays[head_id] = asyncio.get_running_loop().create_task(self._relay(head_id, job))

    def _local_job(self, msg: Job) -> FrontJob:
        entry, model, capability, owner = self._resolve(msg.model)
        local_id = self.dispatcher.next_job_id()
        # a head shares its own admission fairly before it sends: its jobs are one tenant
        # here; a conversation keeps the affinity the head gave it, where it gave one (a
        # head that runs the model on replicas of its own) of a hash's length
        replicas = self.directory.replicas_of(entry) if owner is not None else ()
        lead = ""
        if replicas:
            given = msg.affinity if len(msg.affinity) <= MAX_AFFINITY else ""
            lead = given or affinity.leading_hash(msg.messages, msg.tools, msg.prompt,
                                                  msg.prompt_ids)  # fmt: skip
        message = dataclasses.replace(msg, job_id=local_id, model=model, affinity=lead)
        return FrontJob(local_id, entry, capability, message, owner, raw=True,
                        tenant=f"head:{self.head}", replicas=replicas, affinity=lead)  # fmt: skip

    def _resolve(self, model: object) -> tuple[ModelEntry, dict[str, Any], str, str | None]:
        """A model the head names: the entry this node runs, the spec its engines get,
        the capability it needs and this node's owner of it. A model of this node's own
        catalogue runs from its own file, not from a path on the head's machine; any other
        runs by the head's spec as it is (storage both share, or a fake model)."""
        spec = ModelSpec.parse(model)
        directory = self.directory
        own = directory.catalogue.resolve(spec.id)
        if own is not None:
            return (
                own,
                directory.spec_of(own),
                directory.capability_of(own),
                directory.owner_of(own),
            )
        assert isinstance(model, dict)  # ModelSpec.parse took it
        capability = required_capability(spec.format, spec.options)
        return node.spec_entry(spec), model, capability, None

    async def _relay(self, head_id: int, job: FrontJob) -> None:
        """The local job's output to the head as it arrives, then how it ended."""
        try:
            told = None
            while True:
                # whether it has ended is read before its output is taken: output that
                # arrives while a send waits is taken on the next turn, never lost
                ended = job.outcome is not None
                prompt = job.prompt
                if prompt is not None and prompt is not told:  # ahead of the output, as sent
                    told = prompt
                    await self._send(dataclasses.replace(prompt, job_id=head_id))
                items = job.take_items()
                if items:
                    await self._send(Chunks([x for item in items for x in (head_id, item)]))
                if ended:
                    break
                await job.wait()
            if job.vectors is not None:
                await self._send(Embeddings(head_id, job.vectors))
            if job.tokens is not None:
                await self._send(dataclasses.replace(job.tokens, job_id=head_id))
            outcome = job.outcome
            if isinstance(outcome, Done):
                await self._send(dataclasses.replace(outcome, job_id=head_id))
            else:
                assert outcome is not None
                await self._send(node.fail_of(head_id, outcome))
            self.relayed += 1
        except Exception:  # a defect: the head still hears the job end
            log.exception("node %s: relaying job %d failed", self.name, head_id)
            await self._send(Fail(head_id, FailKind.BACKEND_ERROR, "the node failed to relay it"))
        finally:
            if self._jobs.get(head_id) is job:
                del self._jobs[head_id]
                del self._relays[head_id]
            if job.outcome is None and not job.abandoned:  # a relay cut short
                self.dispatcher.cancel(job)

    def _end_jobs(self) -> None:
        """The head is gone (or this node leaves): what runs for it ends here; a new
        head incarnation reruns or fails them itself."""
        for relay in self._relays.values():
            relay.cancel()
        for job in self._jobs.values():
            if not job.abandoned:
                self.dispatcher.cancel(job)
        self._jobs.clear()
        self._relays.clear()
