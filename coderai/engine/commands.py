"""What the event loop's thread asks of the scheduler thread: one record per request,
queued in the scheduler's inbox and taken between steps (scheduler.py). Typed, so the
scheduler's dispatch on them is checked (a match over these classes), not strings."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from coderai.bus.messages import EngineConfig, Job, ModelSpec


@dataclass(frozen=True, slots=True)
class StartJob:
    job: Job


@dataclass(frozen=True, slots=True)
class Preload:
    """Load a model now (the front's preloads)."""

    spec: ModelSpec


@dataclass(frozen=True, slots=True)
class Loaded:
    """A model's load ended (from the pool's loader thread), by instance key."""

    key: str


@dataclass(frozen=True, slots=True)
class Unload:
    model_id: str


@dataclass(frozen=True, slots=True)
class CancelJob:
    job_id: int


@dataclass(frozen=True, slots=True)
class CancelAll:
    """Every job ends as cancelled; `ended` is set once their DONEs are in the outbox."""

    ended: threading.Event


@dataclass(frozen=True, slots=True)
class HoldJob:
    """The job's client lags: do not step it where the backend can step others alone."""

    job_id: int


@dataclass(frozen=True, slots=True)
class ResumeJob:
    job_id: int


@dataclass(frozen=True, slots=True)
class Configure:
    config: EngineConfig


@dataclass(frozen=True, slots=True)
class FleetMeasured:
    """The fleet's RSS by process, for the host RAM cap."""

    rss: dict[str, int]


@dataclass(frozen=True, slots=True)
class Cool:
    """Pause every step and admission (True) until told to go on (False)."""

    paused: bool


@dataclass(frozen=True, slots=True)
class Stop:
    pass


Command = (
    StartJob | Preload | Loaded | Unload | CancelJob | CancelAll | HoldJob | ResumeJob
    | Configure | FleetMeasured | Cool | Stop
)  # fmt: skip
