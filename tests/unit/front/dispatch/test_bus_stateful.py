"""A stateful property test of the front's bus (hypothesis).

Fake engines on the dispatcher's real ROUTER socket say HELLO, stream CHUNKS and end jobs
with DONE or FAIL in any order: for their own jobs, other engines' jobs, finished jobs and
ids never issued. They leave (BYE), come back as new incarnations, and send garbage; earlier
incarnations keep talking as strangers. Clients submit and cancel requests meanwhile.

After every step the books must balance: no engine holds more jobs than its slots; every
request is in exactly one place (one engine, the queue) or has ended, once, the way the
messages said; the queue waits only while no engine has credit; each engine was sent
exactly the jobs the front counts against it; each job's text is what its engine sent
while it ran there; and every bad frame, and nothing else, was counted as dropped.

Each step ends at a barrier, so that the checks see every message the step sent: the
engine that sent last sends a HEARTBEAT numbered by the test, and the step waits until the
front has taken it (ZeroMQ keeps one peer's messages in order), or until a stranger's
frame has been counted as dropped; then until every engine has read the JOBs sent to it.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)  # fmt: skip

from coderai.bus.codec import decode, encode
from coderai.bus.kinds import FailKind
from coderai.bus.messages import (  # fmt: skip
    Bye,
    Cancel,
    Chunks,
    Done,
    Fail,
    Heartbeat,
    Hello,
    Job,
    Message,
    Welcome,
)
from coderai.catalogue.entries import ModelEntry
from coderai.config import ServerConfig
from coderai.errors import BusProtocolError, EngineFailed, NoEngine
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.jobs import FrontJob
from tests.support.bus import TOKEN

NAMES = ("a", "b")
MODELS = ("m", "n")
#: ids no job ever has
UNKNOWN_IDS = st.integers(900_000, 900_010)
#: the known kinds, and one this front does not know (taken as a backend error)
KINDS = st.sampled_from([*(k.value for k in FailKind), "no_such_kind"])
#: well past any test: the reaper never runs, so no engine is lost for its silence
HEARTBEAT_INTERVAL = 3600.0
#: how long a barrier may wait for what is already on its way (ipc, one process)
SETTLE_LIMIT = 5.0


@dataclass(eq=False)
class FakeEngine:
    """One incarnation of an engine: a DEALER the test drives, and what it was told."""

    name: str
    epoch: int
    slots: int
    sock: zmq.Socket[bytes]
    joined: bool = False
    #: JOBs received and not yet ended by this engine's DONE or FAIL
    open: set[int] = field(default_factory=set)
    cancelled: set[int] = field(default_factory=set)

    @property
    def identity(self) -> bytes:
        return f"{self.name}:{self.epoch}".encode()

    def send(self, msg: Message) -> None:
        self.sock.send_multipart(encode(msg))

    def read(self) -> FakeEngine:
        """Take whatever the front has sent so far."""
        while True:
            try:
                msg = decode(self.sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return self
            if isinstance(msg, Job):
                assert msg.job_id not in self.open, f"job {msg.job_id} sent to {self.name} twice"
                self.open.add(msg.job_id)
            elif isinstance(msg, Cancel):
                self.cancelled.add(msg.job_id)
            elif isinstance(msg, Welcome):
                self.joined = True


@dataclass(eq=False)
class Expected:
    """What the test knows of one request."""

    job: FrontJob
    text: str = ""
    #: what the test, as the request's handler, has taken from the job so far
    taken: str = ""
    started: bool = False
    abandoned: bool = False
    #: engines lost (not left) while it ran on them
    deaths: int = 0
    #: the outcome's type once the messages decided it, and the outcome first seen
    ends_as: type | None = None
    seen: object = None


def _beat(measures: int) -> Heartbeat:
    return Heartbeat("ready", measures=measures)


class BusBooks(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="coderai-bus-")
        self.loop = asyncio.new_event_loop()
        endpoint = f"ipc://{self.dir}/bus.sock"
        self.endpoint = endpoint
        config = ServerConfig(heartbeat_interval=HEARTBEAT_INTERVAL)
        self.dispatcher = Dispatcher(config, endpoint, TOKEN)
        self.loop.run_until_complete(self.dispatcher.start())
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        #: each name's newest incarnation; the older ones, whose sockets still talk
        self.engines: dict[str, FakeEngine] = {}
        self.strangers: list[FakeEngine] = []
        self.requests: dict[int, Expected] = {}
        self.drops = 0
        self.beats = 0

    def teardown(self) -> None:
        try:
            self.loop.run_until_complete(self.dispatcher.stop())
            for want in self.requests.values():
                # at shutdown every request still running or queued is answered
                assert want.job.outcome is not None or self._withdrawn(want)
        finally:
            for engine in [*self.engines.values(), *self.strangers]:
                engine.sock.close(linger=0)
            self.ctx.term()
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers ----------------------------------------------------------------------------
    def _run(self, wait: Callable[[], bool], what: Callable[[], str]) -> None:
        async def settle() -> None:
            try:
                async with asyncio.timeout(SETTLE_LIMIT):
                    while not wait():
                        await asyncio.sleep(0.0005)
            except TimeoutError:
                raise AssertionError(f"never settled: {what()}") from None

        self.loop.run_until_complete(settle())

    def _barrier(self, sender: FakeEngine | None) -> None:
        """Wait until the front has taken what `sender` sent, then until every engine
        holds the JOBs the front sent it."""
        if sender is not None and not sender.joined:
            # a stranger: its frames are dropped, in order
            self._run(
                lambda: self.dispatcher.dropped_frames >= self.drops,
                lambda: f"dropped {self.dispatcher.dropped_frames}, expected {self.drops}",
            )
        elif sender is not None:
            self.beats += 1
            sender.send(_beat(self.beats))
            beat = self.beats
            self._run(
                lambda: self._measures(sender) == beat,
                lambda: f"heartbeat {beat} from {sender.name} never arrived",
            )
        for engine in self._joined():
            self._run(lambda e=engine: self._holds(e), lambda e=engine: self._counts(e))  # type: ignore[misc]

    def _measures(self, engine: FakeEngine) -> int:
        record = self.dispatcher.registry.get(engine.identity)
        assert record is not None, f"{engine.name} is not registered"
        return record.measures

    def _holds(self, engine: FakeEngine) -> bool:
        """Whether the engine has read every JOB the front counts against it, and no other."""
        record = self.dispatcher.registry.get(engine.identity)
        assert record is not None, f"{engine.name} is not registered"
        return engine.read().open == set(record.jobs)

    def _counts(self, engine: FakeEngine) -> str:
        record = self.dispatcher.registry.get(engine.identity)
        counted = set(record.jobs) if record is not None else "nothing"
        return f"{engine.name} holds {engine.open}, the front counts {counted}"

    def _joined(self) -> list[FakeEngine]:
        return [e for e in self.engines.values() if e.joined]

    def _withdrawn(self, want: Expected) -> bool:
        """Cancelled while queued: the handler answers its client; the bus holds nothing."""
        job = want.job
        return want.abandoned and job.outcome is None and not self._places(job)

    def _places(self, job: FrontJob) -> int:
        held = sum(job.id in r.jobs for r in self.dispatcher.registry.all())
        return held + (job in self._queued())

    def _ids(self, data: st.DataObject, engine: FakeEngine) -> int:
        """A job id for a message: the engine's own, another's, a finished one, or none."""
        others = [i for e in self.engines.values() if e is not engine for i in e.open]
        finished = [i for i, w in self.requests.items() if w.job.outcome is not None]
        choices = [UNKNOWN_IDS]
        # its own jobs most often: that is where the books change
        for ids in (*[sorted(engine.open)] * 4, others, finished):
            if ids:
                choices.append(st.sampled_from(ids))
        job_id: int = data.draw(st.one_of(*choices))
        return job_id

    def _lose(self, engine: FakeEngine, died: bool) -> None:
        """What the front does with the jobs of an engine it forgets."""
        for job_id in engine.open:
            want = self.requests[job_id]
            want.deaths += died
            if want.started or want.abandoned or want.deaths > 1:
                want.ends_as = EngineFailed
        engine.open.clear()
        engine.joined = False

    def _new_incarnation(self, name: str, slots: int) -> FakeEngine:
        old = self.engines.get(name)
        epoch = old.epoch + 1 if old else 1
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, f"{name}:{epoch}".encode())
        sock.connect(self.endpoint)
        engine = FakeEngine(name, epoch, slots, sock)
        if old is not None:
            self.strangers.append(old)
        self.engines[name] = engine
        return engine

    # -- rules ------------------------------------------------------------------------------
    @initialize(slots=st.integers(1, 3))
    def first_engine(self, slots: int) -> None:
        """Most of what is worth checking needs an engine: every run starts with one."""
        self.join("a", slots)

    @rule(name=st.sampled_from(NAMES), slots=st.integers(1, 3))
    def join(self, name: str, slots: int) -> None:
        """A new incarnation says HELLO; a live one under that name is replaced (lost)."""
        old = self.engines.get(name)
        engine = self._new_incarnation(name, slots)
        if old is not None and old.joined:
            self._lose(old, died=True)
        engine.send(Hello(name, engine.epoch, 1, "cpu", ["fake"], slots, TOKEN))
        self._run(lambda: engine.read().joined, lambda: f"{name} got no WELCOME")
        self._barrier(engine)

    @rule(models=st.lists(st.sampled_from(MODELS), min_size=1, max_size=3))
    def submit(self, models: list[str]) -> None:
        """Requests arrive, a few at once: enough to fill the engines and queue."""
        for model in models:
            entry = ModelEntry(id=model, format="fake")
            job_id = self.dispatcher.next_job_id()
            message = Job(job_id, entry.spec("fake"), "completion", "hi")
            job = FrontJob(job_id, entry, "fake", message)
            try:
                self.dispatcher.submit(job)
            except NoEngine:
                assert not self.dispatcher.registry.all()
                continue
            self.requests[job_id] = Expected(job)
        self._barrier(None)

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        running = [w for w in self.requests.values() if w.job.outcome is None and not w.abandoned]
        if not running:
            return
        want = data.draw(st.sampled_from(running))
        self.dispatcher.cancel(want.job)
        want.abandoned = True
        self._barrier(None)
        for engine in self._joined():
            if want.job.id in engine.open:
                # the engine is told to stop it
                self._run(
                    lambda e=engine: want.job.id in e.read().cancelled,  # type: ignore[misc]
                    lambda: f"no CANCEL for job {want.job.id}",
                )

    @precondition(lambda self: bool(self._joined()))
    @rule(data=st.data(), texts=st.lists(st.text(max_size=5), max_size=4))
    def chunks(self, data: st.DataObject, texts: list[str]) -> None:
        engine = data.draw(st.sampled_from(self._joined()))
        ids = [self._ids(data, engine) for _ in texts]
        deltas: list[object] = [x for pair in zip(ids, texts, strict=True) for x in pair]
        flaw = data.draw(st.sampled_from(["none", "odd", "not text"]))
        if flaw == "odd":
            deltas.append(1)
        elif flaw == "not text" and deltas:
            deltas[-1] = 7
        engine.send(Chunks(deltas))
        if flaw == "odd":  # not pairs at all: refused whole
            self.drops += 1
            self._barrier(engine)
            return
        # a delta that is not text matters only for a job it would reach: that job ends
        # with an error and takes none of the message's text; the others take theirs
        bad = ids[-1] if flaw == "not text" and ids and self._lands(engine, ids[-1]) else None
        for job_id, text in zip(ids, texts, strict=True):
            if self._lands(engine, job_id) and job_id != bad:
                self.requests[job_id].text += text
                self.requests[job_id].started = True
        if bad is not None:
            self.drops += 1
            want = self.requests[bad]
            want.abandoned = True  # its engine is told to stop it, and keeps its credit
            want.ends_as = want.ends_as or EngineFailed
        self._barrier(engine)
        if bad is not None:
            self._run(lambda: bad in engine.read().cancelled, lambda: f"no CANCEL for job {bad}")

    def _lands(self, engine: FakeEngine, job_id: object) -> bool:
        """Whether output for this id reaches a request: the engine runs it, uncancelled."""
        want = self.requests.get(job_id)  # type: ignore[call-overload]
        return job_id in engine.open and want is not None and not want.abandoned

    @precondition(lambda self: bool(self._joined()))
    @rule(data=st.data(), reason=st.sampled_from(["stop", "length", "cancelled"]))
    def done(self, data: st.DataObject, reason: str) -> None:
        engine = data.draw(st.sampled_from(self._joined()))
        job_id = self._ids(data, engine)
        engine.send(Done(job_id, reason, 1, 1))
        if job_id in engine.open:
            engine.open.discard(job_id)
            want = self.requests[job_id]
            if want.ends_as is None:
                want.ends_as = Done
        self._barrier(engine)

    @precondition(lambda self: bool(self._joined()))
    @rule(data=st.data(), kind=KINDS)
    def fail(self, data: st.DataObject, kind: str) -> None:
        engine = data.draw(st.sampled_from(self._joined()))
        job_id = self._ids(data, engine)
        engine.send(Fail(job_id, kind, "it broke"))
        if job_id in engine.open:
            engine.open.discard(job_id)
            want = self.requests[job_id]
            retried = FailKind.of(kind).retryable and not (want.started or want.abandoned)
            if not retried and want.ends_as is None:
                want.ends_as = type(FailKind.of(kind).error(engine.name, "it broke"))
        self._barrier(engine)

    @precondition(lambda self: bool(self._joined()))
    @rule(data=st.data())
    def bye(self, data: st.DataObject) -> None:
        engine = data.draw(st.sampled_from(self._joined()))
        engine.send(Bye("leaving"))
        self._lose(engine, died=False)
        # a stranger now: its next frame, dropped, is its barrier
        self.drops += 1
        engine.send(_beat(0))
        self._barrier(engine)

    @precondition(lambda self: bool(self.engines))
    @rule(data=st.data(), frames=st.lists(st.binary(max_size=12), min_size=1, max_size=4))
    def garbage(self, data: st.DataObject, frames: list[bytes]) -> None:
        """Frames that are not a message, from anyone."""
        try:
            decode(frames)
        except BusProtocolError:
            pass
        else:
            return  # by chance a message: not garbage
        engine = data.draw(st.sampled_from([*self.engines.values(), *self.strangers]))
        engine.sock.send_multipart(frames)
        self.drops += 1
        self._barrier(engine)

    @precondition(lambda self: bool(self.strangers))
    @rule(data=st.data())
    def stranger(self, data: st.DataObject) -> None:
        """An earlier incarnation ends a job it had: a peer that has not said HELLO."""
        engine = data.draw(st.sampled_from(self.strangers))
        job_id = data.draw(st.one_of(UNKNOWN_IDS, st.sampled_from(sorted(self.requests) or [1])))
        engine.send(Done(job_id, "stop", 1, 1))
        self.drops += 1
        self._barrier(engine)

    # -- the books ------------------------------------------------------------------------
    @invariant()
    def credit_is_never_overdrawn(self) -> None:
        for record in self.dispatcher.registry.all():
            assert len(record.jobs) <= record.slots, (record.name, set(record.jobs))
            # a job the front answered itself keeps its credit until its engine confirms
            assert all(j.outcome is None or j.abandoned for j in record.jobs.values())

    @invariant()
    def every_request_is_in_one_place_or_ended(self) -> None:
        for want in self.requests.values():
            job = want.job
            places = self._places(job)
            if job.outcome is not None:
                # ended; one that the front ended may still hold its engine's credit
                assert places == 0 or (
                    places == 1 and job.abandoned and job not in self._queued()
                ), (job.id, places)
            elif self._withdrawn(want):
                assert places == 0, (job.id, places)
            else:
                assert places == 1, (job.id, places)

    def _queued(self) -> list[FrontJob]:
        return list(self.dispatcher.queue)

    @invariant()
    def the_queue_waits_only_for_credit(self) -> None:
        if len(self.dispatcher.queue):
            assert not any(e.free for e in self.dispatcher.serving())

    @invariant()
    def each_engine_holds_what_the_front_counts(self) -> None:
        registered = {r.identity for r in self.dispatcher.registry.all()}
        assert registered == {e.identity for e in self._joined()}
        for engine in self._joined():
            record = self.dispatcher.registry.get(engine.identity)
            assert record is not None and engine.open == set(record.jobs)

    @invariant()
    def texts_and_outcomes_are_what_the_engines_sent(self) -> None:
        for want in self.requests.values():
            job = want.job
            want.taken += job.take()  # as a handler takes it
            assert want.taken == want.text, (job.id, want.taken, want.text)
            if want.seen is None:
                want.seen = job.outcome
            assert job.outcome is want.seen, f"job {job.id} ended twice"
            if want.ends_as is None:
                assert job.outcome is None, (job.id, job.outcome)
            else:
                assert type(job.outcome) is want.ends_as, (job.id, job.outcome, want.ends_as)

    @invariant()
    def every_bad_frame_and_nothing_else_is_dropped(self) -> None:
        assert self.dispatcher.dropped_frames == self.drops


BusBooks.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_the_bus_keeps_its_books = BusBooks.TestCase
