"""A request's job as the front sees it: what has arrived for it and how it ended.

Which engine runs a job is recorded in one place, the engine's record (`EngineRecord.jobs`),
whose size is the front's side of that engine's credit; the dispatcher looks it up there.

The bus loop only appends text and sets an event; the request's own handler task renders
and writes. A slow client therefore never blocks the bus loop, and while it lags its
pending text is merged into one event instead of queueing one event per token. What waits
is counted, so that past a bound the engine is told to hold the sequence (back-pressure).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coderai.bus.messages import Done, Job, Prompt, Tokens
from coderai.catalogue.entries import ModelEntry
from coderai.errors import CoderaiError
from coderai.front.dispatch.output import Collected, Piece

Outcome = Done | CoderaiError


@dataclass(eq=False)
class FrontJob:
    id: int
    entry: ModelEntry
    #: what an engine must be able to run: "fake", "gguf" or "transformers"
    capability: str
    message: Job
    #: the engine that owns this model (placement), if any
    owner: str | None = None
    #: the engines of a model with replicas (placement), routed among by replicas.py
    replicas: tuple[str, ...] = ()
    #: which conversation it belongs to, for cache-aware routing (front/api/affinity.py)
    affinity: str = ""
    #: the JOB encoded once, at admission: what cannot be encoded is refused up front
    frames: list[bytes] = field(default_factory=list)
    enqueued_at: float = field(default_factory=time.monotonic)
    #: who it is queued for (an API key, a console user; activity.share): the queue
    #: shares admission fairly between them
    tenant: str = ""
    #: its tenant's share against others' (an API key's weight; 1 otherwise)
    weight: float = 1.0
    #: the engine that produced the first output, or that the job ended on: it names the
    #: response's engine in the X-CoderAI-Engine header
    served_by: str | None = None
    started: bool = False
    #: when its first output arrived (monotonic)
    first_at: float | None = None
    #: the client went away; output is dropped until the engine confirms the cancel
    abandoned: bool = False
    outcome: Outcome | None = None
    #: an embedding job's vectors, or a tokenize job's answer, which arrive before its DONE
    vectors: list[Any] | None = None
    tokens: Tokens | None = None
    #: its prompt as the engine last reported it: admitted (counted) and how far read
    prompt: Prompt | None = None
    #: on an engine (not in the front's queue); its handler is woken when it is sent
    dispatched: bool = False
    #: engines that died while this job ran on them, in order
    lost_on: list[str] = field(default_factory=list)
    #: its engine was told to hold it until the client catches up
    held: bool = False
    #: characters of text received and not yet taken by the handler
    pending: int = 0
    #: a stream's handler task, and since when its current write has waited (if it has)
    writer: asyncio.Task[Any] | None = None
    writing_since: float | None = None
    #: its handler was interrupted while waiting to write to a client that does not read
    interrupted: bool = False
    #: its output has tool calls or logprobs: the handler takes pieces (take_items)
    structured: bool = False
    #: pieces arrived for it (a chat job's reasoning) though it was not structured: its
    #: plain-text handler takes them too (take_items)
    pieces: bool = False
    #: run for a head (this front is a node): its output is kept as the engine sent it,
    #: to be relayed as is (take_items)
    raw: bool = False
    #: a plain-text stream's writer on the bus callback's side (text_relay.TextStream):
    #: it writes a text now, or returns False to leave it to the handler
    sink: Callable[[str], bool] | None = None
    _parts: list[Any] = field(default_factory=list)
    #: set when output or the outcome arrives; the jobs of one request (n choices,
    #: several prompts) share one, so that their one handler wakes for any of them
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def _first_output(self, engine: str) -> None:
        self.started = True
        self.served_by = engine
        self.first_at = time.monotonic()

    def prompted(self, engine: str, prompt: Prompt) -> None:
        """The engine named admitted the prompt, or read more of it: a stream that opens
        now names it as the engine serving it."""
        self.prompt = prompt
        if not self.started:
            self.served_by = engine
        self.wake.set()

    def push(self, engine: str, text: str) -> int:
        """Add text from the engine named; returns the characters now waiting."""
        if not self.started:
            self._first_output(engine)
        # written at once unless the handler has text waiting or a write in flight, which
        # this text must follow
        sink = self.sink
        if sink is not None and not self._parts and self.writing_since is None and sink(text):
            return 0
        self._parts.append(text)
        self.pending += len(text)
        self.wake.set()
        return self.pending

    def push_pieces(self, engine: str, pieces: list[Piece]) -> int:
        """Add structured output (calls, logprobs) from the engine named."""
        if not self.started:
            self._first_output(engine)
        self._parts.extend(pieces)
        self.pieces = True
        self.pending += sum(
            len(p.text) + len(p.reasoning) + sum(len(c.arguments) for c in p.calls) for p in pieces
        )
        self.wake.set()
        return self.pending

    def push_raw(self, engine: str, delta: object) -> int:
        """Add one CHUNKS delta as the engine sent it (a string, or structured pieces)."""
        if not self.started:
            self._first_output(engine)
        self._parts.append(delta)
        self.pending += len(delta) if isinstance(delta, str) else 1
        self.wake.set()
        return self.pending

    def finish(self, outcome: Outcome, engine: str | None = None) -> None:
        """End the job, once; `engine` is the one it ended on, if it was dispatched."""
        if self.outcome is None:
            self.outcome = outcome
            if self.served_by is None:
                self.served_by = engine
            self.wake.set()

    async def wait(self) -> None:
        await self.wake.wait()
        self.wake.clear()

    def take(self) -> str:
        parts = self._parts
        if not parts:
            return ""
        self._parts = []
        self.pending = 0
        return parts[0] if len(parts) == 1 else "".join(parts)

    def take_items(self) -> list[str | Piece]:
        """What arrived since the last take, texts and pieces in order."""
        parts, self._parts = self._parts, []
        self.pending = 0
        return parts


def collect(jobs: list[FrontJob], collected: list[Collected]) -> bool:
    """Take each job's new output into its collection (a whole answer of several
    choices); whether every job has ended."""
    for job, got in zip(jobs, collected, strict=True):
        for item in job.take_items():
            got.add(item)
    return all(job.outcome is not None for job in jobs)
