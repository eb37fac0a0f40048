"""The decode loop of an engine, on its own thread so model work never stalls the socket.

Each iteration admits new jobs and cancellations (so a CANCEL takes effect within one step),
then steps every instance whose turn has come (at most one token per sequence; a sequence
may instead read part of its prompt, or wait for room), and publishes the step's deltas as
one batch.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from typing import Any, assert_never

from coderai.bus.kinds import FailKind, FinishReason, JobKind
from coderai.bus.messages import (
    Done,
    Embeddings,
    EngineConfig,
    Fail,
    Job,
    Message,
    ModelSpec,
    Prompt,
    Tokens,
)
from coderai.engine import die_at
from coderai.engine.backends.base import (
    END,
    PENDING,
    READING,
    Backend,
    ModelInstance,
    Sequence,
    StepResult,
    completion_limit,
)
from coderai.engine.commands import (
    CancelAll,
    CancelJob,
    Command,
    Configure,
    Cool,
    FleetMeasured,
    HoldJob,
    Loaded,
    Preload,
    ResumeJob,
    StartJob,
    Stop,
    Unload,
)
from coderai.engine.decoding import structured
from coderai.engine.decoding.stops import StopMatcher
from coderai.engine.holdings import Holdings, Report
from coderai.engine.outbox import Delta, Outbox
from coderai.engine.pool import ModelPool
from coderai.errors import JobError

log = logging.getLogger("coderai.engine")
#: jobs an instance answers at once, whole, rather than step by step
ANSWERED = frozenset({JobKind.EMBEDDING, JobKind.TOKENIZE, JobKind.DETOKENIZE})
#: seconds between copies of the counters the heartbeat reports
STATS_INTERVAL = 0.2
#: seconds between copies of what its models hold of each conversation (holds): each
#: looks through every prefix its caches keep
HOLDS_INTERVAL = 1.0
#: seconds between two reports of one prompt's progress while it is read
PROGRESS_INTERVAL = 0.25
#: how long the test seam waits for what admission decided to be handed to the socket
#: before it kills, and then for libzmq's I/O thread to write it out
OUTBOX_DRAIN_SECONDS = 2.0
SOCKET_FLUSH_SECONDS = 0.25


class Scheduler:
    def __init__(self, backends: dict[str, Backend], outbox: Outbox, slots: int) -> None:
        self.slots = slots
        self._outbox = outbox
        self._inbox: queue.Queue[Command] = queue.Queue()
        self.pool = ModelPool(backends, on_loaded=lambda key: self._inbox.put(Loaded(key)))
        self._batches: dict[ModelInstance, list[Sequence]] = {}
        self._next_step: dict[ModelInstance, float] = {}
        #: per instance key, sequences waiting for an instance with room, in arrival order
        self._waiting: dict[str, deque[tuple[Sequence, ModelSpec]]] = {}
        self._jobs: dict[int, Sequence] = {}
        #: instance keys whose instances gained room this iteration
        self._freed: set[str] = set()
        self._deltas: list[tuple[int, Delta]] = []
        self._terminal: list[Message] = []
        #: prompts admitted and read (PROMPT), sent ahead of the step's deltas
        self._notes: list[Message] = []
        #: jobs whose client lags (the front said HOLD): not stepped where the backend allows
        self._held: set[int] = set()
        #: instances whose last step moved no sequence (all wait for KV room that only a
        #: finish, a cancel or a resume frees): not stepped again until one of those
        self._stalled: set[ModelInstance] = set()
        #: per model counters for the heartbeat: replaced, never changed, by this thread
        self.stats: dict[str, dict[str, int]] = {}
        #: the same for the RAM cap: resident models (size, busy, idle for); what loads
        #: wait for and what is loading, the pool publishes itself (pool.room_state)
        #: when the resident report was made (monotonic), and the report: replaced whole,
        #: read by the heartbeat on another thread (residents_now)
        self._residents: tuple[float, list[dict[str, object]]] = (time.monotonic(), [])
        self._stats_at = 0.0
        #: per model id, the conversations its jobs came from (holdings.py): kept while
        #: the engine lives, whatever is loaded (a model loaded again finds on disk what
        #: it held)
        self._holdings: dict[str, Holdings] = {}
        #: the job id of the last JOB taken (0: none since the engine joined its front),
        #: and what its models held as of then: (taken, {model: Report}), replaced whole,
        #: read by the heartbeat on another thread
        self._taken = 0
        self.holds: tuple[int, dict[str, Report]] = (0, {})
        self._holds_at = 0.0
        #: a job of a conversation started or ended since the last report
        self._holds_due = False
        self._stopped = False
        #: paused to cool: no step and no new sequence until it is over; running sequences
        #: wait (their clients see a gap, never an error), cancels still apply
        self._cooling = False

    # -- called from the event loop thread -------------------------------------------------
    def submit(self, job: Job) -> None:
        self._inbox.put(StartJob(job))

    def preload(self, spec: ModelSpec) -> None:
        self._inbox.put(Preload(spec))

    def cancel(self, job_id: int) -> None:
        seq = self._jobs.get(job_id)  # a dict lookup, atomic: see running()
        if seq is not None:
            seq.cancelled = True  # a step reading its prompt stops at once (a backend's)
        self._inbox.put(CancelJob(job_id))

    def cancel_all(self, ended: threading.Event) -> None:
        """Every job, running or waiting, ends as cancelled (the front they came from is
        gone); `ended` is set once their DONEs are in the outbox."""
        for seq in list(self._jobs.values()):  # a copy made in one call: atomic
            seq.cancelled = True
        self._inbox.put(CancelAll(ended))

    def hold(self, job_id: int) -> None:
        self._inbox.put(HoldJob(job_id))

    def resume(self, job_id: int) -> None:
        self._inbox.put(ResumeJob(job_id))

    def stop(self) -> None:
        self._inbox.put(Stop())

    def measured(self, fleet: dict[str, int]) -> None:
        """The fleet's RSS by process, for the host RAM cap."""
        self._inbox.put(FleetMeasured(fleet))

    def cool(self, paused: bool) -> None:
        """Pause every step and admission (True) until told to go on (False)."""
        self._inbox.put(Cool(paused))

    def running(self, job_id: int) -> bool:
        """Whether a job is still in this engine (read from the loop's thread: a dict
        lookup is atomic; a job that ends just after is resumed by the front anyway)."""
        return job_id in self._jobs

    def unload(self, model_id: str) -> None:
        self._inbox.put(Unload(model_id))

    def configure(self, config: EngineConfig) -> None:
        """Applied between steps, on the scheduler thread, which owns the pool."""
        self._inbox.put(Configure(config))

    # -- the scheduler thread -------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self._stopped:
                self._admit(self._wait_time())
                # what admission decided (a prompt admitted, a job refused) goes out now,
                # not after the step, which may read a long prompt's first chunk
                self._flush()
                self._step_due()
                self._admit_freed()
                self._flush()
                self._publish_stats()
        finally:
            self.pool.close()

    def _publish_stats(self, force: bool = False) -> None:
        """A fresh copy of the counters a few times a second (the heartbeat reads one each
        interval), and before the loop waits for work: cheap beside a step, and never a
        dict changing under its reader."""
        now = time.monotonic()
        if not force and now - self._stats_at < STATS_INTERVAL:
            return
        self._stats_at = now
        stats = self.pool.stats()
        for waiting in self._waiting.values():
            if waiting:
                model = stats.setdefault(waiting[0][1].id, {})
                model["queued"] = model.get("queued", 0) + len(waiting)
        # what the models hold goes first: a reader that sees a job ended in the counters
        # sees at least as new a report (a job's start and end make it due at once)
        if self._holds_due or now - self._holds_at >= HOLDS_INTERVAL:
            self._holds_at, self._holds_due = now, False
            self.holds = (self._taken, self._holding())
        self.stats = stats
        self._residents = (time.monotonic(), self.pool.residents_report())

    def _holding(self) -> dict[str, Report]:
        """Per resident model that keeps prefixes: the conversations of its jobs here,
        then those whose prefix its caches keep (engine/holdings.py)."""
        leads = self.pool.leads()
        running: dict[str, list[str]] = {model: [] for model in leads}
        for seq in reversed(self._jobs.values()):  # the most recent first
            model = seq.job.model.get("id")
            if seq.job.affinity and isinstance(model, str) and model in leads:
                running[model].append(seq.job.affinity)
        return {model: self._holdings.get(model, Holdings()).held(present, running[model])
                for model, present in leads.items()}  # fmt: skip

    def residents_now(self) -> list[dict[str, object]]:
        """The resident report with idle times as of now: an idle engine's loop does not
        run to make a new one, and the front dates each model's last use from them."""
        at, report = self._residents
        waited = time.monotonic() - at
        return [r if r["busy"] else {**r, "idle_for": float(r["idle_for"]) + waited}  # type: ignore[arg-type]
                for r in report]  # fmt: skip

    def _admit_freed(self) -> None:
        while self._freed:
            self._admit_waiting(self._freed.pop())

    def _wait_time(self) -> float | None:
        if self._cooling:
            return None  # nothing is stepped until the pause ends (a message wakes it)
        if self._held or self._stalled:
            steps = [
                self._next_step[i]
                for i, b in self._batches.items()
                if i not in self._stalled and self._due(i, b)
            ]
        else:
            steps = list(self._next_step.values())
        if not steps:
            return None  # nothing to step until a job, a resume or a load arrives
        return max(0.0, min(steps) - time.monotonic())

    def _due(self, instance: ModelInstance, batch: list[Sequence]) -> list[Sequence]:
        """The sequences to step: all of them, less the held ones where the backend can
        step sequences apart (a batched backend decodes every row in one pass)."""
        if not self._held or not instance.can_hold:
            return batch
        return [seq for seq in batch if seq.job.job_id not in self._held]

    def _admit(self, timeout: float | None) -> None:
        if timeout is None:  # waiting for work: the counters stay as they are now
            self._publish_stats(force=True)
        block = timeout is None or timeout > 0
        while True:
            try:
                command = self._inbox.get(block, timeout)
            except queue.Empty:
                return
            block = False
            self._stalled.clear()
            self._obey(command)
            if self._stopped:
                return

    def _obey(self, command: Command) -> None:
        match command:
            case StartJob(job):
                self._taken = job.job_id
                self._holds_due = self._holds_due or bool(job.affinity)
                self._start(job)
            case CancelJob(job_id):
                self._held.discard(job_id)
                self._cancel(job_id)
            case CancelAll(ended):
                self._held.clear()
                for job_id in list(self._jobs):
                    self._cancel(job_id)
                # the next JOB comes from a new front, which numbers its jobs anew: the
                # report says so at once, without the jobs just ended
                self._taken = 0
                self._holds_at, self._holds_due = time.monotonic(), False
                self.holds = (0, self._holding())
                self._flush()
                ended.set()
            case HoldJob(job_id):
                if job_id in self._jobs:
                    self._held.add(job_id)
            case ResumeJob(job_id):
                self._held.discard(job_id)
            case Loaded(key):
                self._loaded(key)
            case Preload(spec):
                self._preload(spec)
            case Unload(model_id):
                self.pool.unload(model_id)
            case Configure(config):
                self._configure(config)
            case FleetMeasured(rss):
                # the fleet's memory, measured: waiting loads try again, or give up past
                # their wait (the front unloads idle models where the fleet lacks room)
                self._freed.update(self.pool.measured(rss))
                for key, why in self.pool.expired_waits(time.monotonic()).items():
                    self._fail_waiting(key, FailKind.LOAD_FAILED, why)
            case Cool(paused):
                self._cooling = paused
                if not paused:  # what waited for the pause to end may start now
                    self._freed.update(self._waiting)
            case Stop():
                self._stopped = True
            case _:
                assert_never(command)

    def _start(self, job: Job) -> None:
        try:
            self._admit_job(job)
        except Exception as exc:  # a bad job fails that job, never the engine
            log.warning("job %d rejected: %s", job.job_id, exc)
            seq = self._jobs.get(job.job_id)
            if seq is not None:
                self._finish_fail(seq, FailKind.BAD_JOB, f"invalid job: {exc!r}")
            else:
                self._fail_new(job.job_id, FailKind.BAD_JOB, f"invalid job: {exc!r}")

    def _configure(self, config: EngineConfig) -> None:
        if config.slots is not None:
            # checked only as a job is admitted: jobs running past a lowered limit finish
            self.slots = config.slots
        if config.max_model_instances is not None:
            self.pool.max_instances = config.max_model_instances
        if config.memory_budget_mb is not None:
            self.pool.budget_bytes = int(config.memory_budget_mb * (1 << 20))
        if config.max_ram_mb is not None:
            self.pool.ram_cap_bytes = int(config.max_ram_mb * (1 << 20))
        if config.room_wait_seconds is not None:
            self.pool.room_wait = config.room_wait_seconds

    def _admit_job(self, job: Job) -> None:
        if job.job_id in self._jobs:
            log.warning("job %d submitted twice; ignoring the second", job.job_id)
            return
        if len(self._jobs) >= self.slots:
            # the front dispatches within credit; this guards against a confused front
            self._fail_new(job.job_id, FailKind.BUSY, "engine has no free slot")
            return
        seq = Sequence(job=job, stopper=StopMatcher(job.stop))
        self._jobs[job.job_id] = seq
        try:
            model = ModelSpec.parse(job.model)  # the edge: a bad spec fails this job
            spec = self.pool.backend_for(model).instance_spec(model, job.kind)
            seq.key = spec.key()
            self._waiting.setdefault(seq.key, deque()).append((seq, spec))
            self._admit_waiting(seq.key)
        except JobError as exc:
            self._finish_fail(seq, exc.kind, exc.message)

    def _admit_waiting(self, key: str) -> None:
        """Start waiting sequences of one model while its instances have room (and the
        engine is not cooling)."""
        if self._cooling:
            return
        waiting = self._waiting.get(key)
        while waiting:
            seq, spec = waiting[0]
            try:
                instance = self.pool.acquire(spec)
            except JobError as exc:  # the load cannot start (e.g. it can never fit)
                self._fail_waiting(key, exc.kind, exc.message)
                return
            if instance is None:
                return
            waiting.popleft()
            seq.instance = instance
            self._begin(instance, seq)
        self._waiting.pop(key, None)

    def _preload(self, spec: ModelSpec) -> None:
        try:
            self.pool.preload(spec)
        except JobError as exc:
            log.error("cannot preload model %s: %s", spec.id, exc.message)

    def _loaded(self, key: str) -> None:
        try:
            self.pool.finish_load(key)
        except Exception as exc:
            log.error("model load failed: %s", exc)
            if not self.pool.has_resident(key):
                kind = exc.kind if isinstance(exc, JobError) else FailKind.LOAD_FAILED
                message = exc.message if isinstance(exc, JobError) else str(exc)
                for seq, _spec in list(self._waiting.pop(key, ())):
                    self._finish_fail(seq, kind, message)
            return
        self._admit_waiting(key)

    def _begin(self, instance: ModelInstance, seq: Sequence) -> None:
        answered = seq.job.kind in ANSWERED
        try:
            self._answer(instance, seq) if answered else instance.start(seq)
        except JobError as exc:
            self._finish_fail(seq, exc.kind, exc.message)
            return
        except Exception as exc:  # e.g. messages without a role: the job is bad
            self._finish_fail(seq, FailKind.BAD_JOB, f"invalid job: {exc!r}")
            return
        if answered:
            return
        model = seq.job.model.get("id")
        if isinstance(model, str):  # ModelSpec.parse took the spec: it is
            self._holdings.setdefault(model, Holdings()).note(seq.job.affinity, seq.lead)
        try:
            structured.prepare(seq, instance)
        except JobError as exc:
            self._finish_fail(seq, exc.kind, exc.message)
            return
        except Exception as exc:  # a grammar or tokenizer failure fails its job only
            log.exception("job %d: structured output could not be set up", seq.job.job_id)
            self._finish_fail(seq, FailKind.BACKEND_ERROR, f"structured output: {exc!r}")
            return
        seq.limit = completion_limit(seq.job.max_tokens, seq.room)
        self._report(seq)
        batch = self._batches.setdefault(instance, [])
        if not batch:
            self._next_step[instance] = time.monotonic()
        batch.append(seq)

    def _cancel(self, job_id: int) -> None:
        seq = self._jobs.get(job_id)
        if seq is not None:
            self._finish(seq, FinishReason.CANCELLED)

    def _step_due(self) -> None:
        if self._cooling:
            return
        now = time.monotonic()
        for instance, batch in list(self._batches.items()):
            if self._next_step[instance] > now or instance in self._stalled:
                continue
            # a copy: finishing a sequence removes it from its batch
            due = list(self._due(instance, batch) if self._held else batch)
            if not due:
                continue
            if die_at.RULES:
                self._die_at(instance, due)
            try:
                results = instance.step(due)
            except Exception as exc:  # a backend bug fails its batch, never the engine
                log.exception("step failed")
                for seq in due:
                    self._finish_fail(seq, FailKind.BACKEND_ERROR, str(exc))
                continue
            if all(result is PENDING for result in results):
                self._stalled.add(instance)
            for seq, result in zip(due, results, strict=True):
                try:
                    self._apply(seq, result)
                except Exception as exc:  # one sequence's output fails that one only
                    log.exception("job %d: its output could not be handled", seq.job.job_id)
                    if seq.job.job_id in self._jobs:
                        self._finish_fail(seq, FailKind.BACKEND_ERROR, repr(exc))
            if instance in self._next_step:  # the batch may have just emptied
                # pace from the schedule, not from now, but never catch up a backlog
                self._next_step[instance] = max(
                    self._next_step[instance] + instance.step_interval, now
                )

    def _die_at(self, instance: ModelInstance, due: list[Sequence]) -> None:
        """The test seam (die_at.py): the step about to read a prompt or decode a token
        kills the engine where a rule says. What admission decided is sent first (as the
        flush before each step lets it be, ahead of a real crash inside the step)."""
        reading = any(seq.completion_tokens == 0 for seq in due)
        phase = "prompt" if reading else "generate"
        if die_at.due(die_at.RULES, phase, instance.extra_buffer_types) is not None:
            self._outbox.sent.wait(OUTBOX_DRAIN_SECONDS)
            time.sleep(SOCKET_FLUSH_SECONDS)
            die_at.at(phase, instance.extra_buffer_types)

    def _report(self, seq: Sequence, now: float = 0.0) -> None:
        """Tell the front how far the prompt is read: once at admission (now 0), then at
        most every PROGRESS_INTERVAL."""
        if now and now - seq.reported_at < PROGRESS_INTERVAL:
            return
        seq.reported_at = now or time.monotonic()
        self._notes.append(Prompt(seq.job.job_id, seq.prompt_tokens, seq.read, seq.cached_tokens))

    def _apply(self, seq: Sequence, result: StepResult) -> None:
        if isinstance(result, list):  # tokens a draft gave: each as if stepped alone
            for one in result:
                if seq.job.job_id not in self._jobs:  # a stop, its limit or its call
                    return
                self._apply(seq, one)
            return
        if result is READING:
            self._report(seq, time.monotonic())
            return
        if result is PENDING:
            return
        if isinstance(result, Exception):
            kind = result.kind if isinstance(result, JobError) else FailKind.BACKEND_ERROR
            self._finish_fail(seq, kind, str(result))
            return
        if result is END:
            self._emit(seq, seq.stopper.flush(), end=True, token=False)
            self._finish(seq, FinishReason.STOP)
            return
        assert isinstance(result, str)
        seq.completion_tokens += 1
        text, stopped = seq.stopper.feed(result)
        if stopped:
            self._emit(seq, text, end=True, stopped=True)
            self._finish(seq, FinishReason.STOP)
            return
        if seq.completion_tokens >= seq.limit:
            self._emit(seq, text + seq.stopper.flush(), end=True)
            self._finish(seq, FinishReason.LENGTH)
            return
        self._emit(seq, text)
        if seq.parser is not None and seq.parser.done:  # parallel_tool_calls false
            self._finish(seq, FinishReason.STOP)

    def _emit(
        self, seq: Sequence, text: str, end: bool = False, stopped: bool = False, token: bool = True
    ) -> None:
        """A delta is the text itself, or, for a sequence with reasoning, tool calls or
        logprobs, a map of what it carries: "text" (content), "reasoning" (text),
        "calls" ([index, name, arguments fragment] each) and "logprobs"
        (structured.logprob_entry each)."""
        if seq.parser is None and seq.logprobs is None and seq.reasoning is None:
            if text:
                self._deltas.append((seq.job.job_id, text))
            return
        delta: dict[str, Any] = {}
        entries = self._released_logprobs(seq, text, end, stopped)
        if seq.reasoning is not None:
            before = seq.reasoning.reasoning
            parts = structured.split(seq, text, end)
            # a token thinks if it is read inside the block, or opens or closes it
            if token and (before or seq.reasoning.reasoning):
                seq.reasoning_tokens += 1
            text = parts.content
            if parts.reasoning:
                delta["reasoning"] = parts.reasoning
        if seq.parser is not None:
            before = seq.parser.thinking
            parsed = structured.read(seq, text, end)
            text = parsed.content
            if parsed.reasoning:  # a reader of channels (harmony) splits reasoning itself
                delta["reasoning"] = parsed.reasoning
            if token and (before or seq.parser.thinking):
                seq.reasoning_tokens += 1
            if parsed.calls:
                delta["calls"] = [[d.index, d.name, d.arguments] for d in parsed.calls]
        if token and seq.job.thinking_budget >= 0:
            structured.budget(seq)
        if entries:
            delta["logprobs"] = entries
        if not delta:
            if text:
                self._deltas.append((seq.job.job_id, text))
            return
        if text:
            delta["text"] = text
        self._deltas.append((seq.job.job_id, delta))

    @staticmethod
    def _released_logprobs(seq: Sequence, text: str, end: bool, stopped: bool) -> list[Any]:
        """Log-probabilities go out with their tokens' text: while the stop matcher holds
        text back, so are its tokens' entries; at a stop, the tokens past the emitted text
        (the stop string's own) are dropped."""
        pending = seq.logprobs
        if not pending:
            return []
        if seq.stopper.held and not end:
            seq.logprob_chars += len(text)  # sent now, its tokens' entries later
            return []
        sent, seq.logprobs, seq.logprob_chars = seq.logprob_chars + len(text), [], 0
        if not stopped:
            return pending
        kept, offset = [], 0
        for entry in pending:  # entry[0]: the token's bytes
            if offset >= sent:
                break
            kept.append(entry)
            offset += len(entry[0].decode("utf-8", errors="replace"))
        return kept

    def _detach(self, seq: Sequence) -> None:
        del self._jobs[seq.job.job_id]
        self._holds_due = self._holds_due or bool(seq.job.affinity)
        self._held.discard(seq.job.job_id)
        instance = seq.instance
        if instance is None:
            waiting = self._waiting.get(seq.key, deque())
            for entry in [e for e in waiting if e[0] is seq]:
                waiting.remove(entry)
            return
        batch = self._batches.get(instance)
        if batch is not None and seq in batch:
            batch.remove(seq)
            if not batch:
                del self._batches[instance]
                del self._next_step[instance]
        instance.release(seq)
        self.pool.release(instance)
        self._stalled.discard(instance)  # the cells it held are free
        seq.instance = None
        # admitted after this iteration's steps, not from inside them
        self._freed.add(seq.key)

    def _answer(self, instance: ModelInstance, seq: Sequence) -> None:
        """Run a job whose answer is one message, sent just before its DONE."""
        job = seq.job
        answer: Message
        if job.kind == JobKind.EMBEDDING:
            vectors, seq.prompt_tokens = instance.embed(job.input_ids or job.inputs)
            answer = Embeddings(job.job_id, vectors)
        elif job.kind == JobKind.TOKENIZE:
            ids, context = instance.tokenize(job)
            seq.prompt_tokens = len(ids)
            answer = Tokens(job.job_id, ids=ids, context=context)
        else:
            seq.prompt_tokens = len(job.prompt_ids)
            answer = Tokens(job.job_id, text=instance.detokenize(job.prompt_ids))
        self._terminal.append(answer)
        self._finish(seq, FinishReason.STOP)

    def _finish(self, seq: Sequence, reason: str) -> None:
        if reason == FinishReason.STOP and seq.parser is not None and seq.parser.called:
            reason = FinishReason.TOOL_CALLS
        self._detach(seq)
        self._terminal.append(
            Done(
                seq.job.job_id,
                reason,
                seq.prompt_tokens,
                seq.completion_tokens,
                seq.cached_tokens,
                seq.stopper.matched,
                seq.reasoning_tokens,
            )
        )

    def _finish_fail(self, seq: Sequence, kind: str, message: str) -> None:
        self._detach(seq)
        self._terminal.append(Fail(seq.job.job_id, kind, message))

    def _fail_waiting(self, key: str, kind: str, message: str) -> None:
        """Fail every sequence waiting for an instance of `key`."""
        for seq, _ in list(self._waiting.pop(key, ())):
            self._finish_fail(seq, kind, message)

    def _fail_new(self, job_id: int, kind: str, message: str) -> None:
        self._terminal.append(Fail(job_id, kind, message))

    def _flush(self) -> None:
        if self._deltas or self._terminal or self._notes:
            self._outbox.publish(self._deltas, self._terminal, self._notes)
            self._deltas = []
            self._terminal = []
            self._notes = []
