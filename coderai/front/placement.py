"""Which engine runs a job: pure functions over the registry's records."""

from __future__ import annotations

from collections.abc import Iterable

from coderai.front.registry import EngineRecord


def compatible(fmt: str, engines: Iterable[EngineRecord]) -> list[EngineRecord]:
    return [e for e in engines if fmt in e.capabilities]


def choose_engine(
    fmt: str,
    model_id: str,
    pin: str | None,
    default_engine: str | None,
    engines: Iterable[EngineRecord],
) -> EngineRecord | None:
    """The engine to dispatch to now, or None if every compatible one is out of credit.

    Precedence: the model's pin (if that engine can run the format), then an engine that
    already has the model resident, then the default engine, then the least loaded.
    """
    candidates = compatible(fmt, engines)
    if pin is not None:
        pinned = [e for e in candidates if e.name == pin]
        if pinned:
            return pinned[0] if pinned[0].free else None
    free = [e for e in candidates if e.free]
    if not free:
        return None
    resident = [e for e in free if model_id in e.loaded]
    if resident:
        return max(resident, key=lambda e: e.free)
    for engine in free:
        if engine.name == default_engine:
            return engine
    return max(free, key=lambda e: (e.free, -len(e.loaded)))
