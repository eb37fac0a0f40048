"""Idle unload: a model idle on an engine for its `keep_alive` seconds is unloaded (the
entry's, else `models.keep_alive`; -1: never, as Ollama names it). A model kept loaded
(`keep_loaded`: its keep_alive is -1, ModelDirectory.keep_alive_of) is never unloaded for
idleness nor for room (engines and room.py treat it as busy); only an operator's Unload
takes it.

Decided by the front, which alone knows the catalogue's keep_alive and which models have
jobs queued: pure functions over the engines' resident reports, with the time passed in.
A model is idle while no sequence runs on it, no job of it is on its engine, and none
waits in the front's queue; its idleness dates from its last use as the engine reported
it (on the front's clock: the heartbeat's arrival less its `idle_for`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from coderai.front.dispatch.registry import EngineRecord

#: keep_alive that never unloads
NEVER = -1.0


@dataclass(frozen=True)
class Due:
    """When a resident model of an engine is unloaded if nothing uses it (monotonic)."""

    engine: EngineRecord
    model: str
    at: float


def schedule(
    engines: list[EngineRecord],
    keep_alive_of: Callable[[str], float],
    waiting: Callable[[str], bool],
    ended: Mapping[tuple[bytes, str], float] | None = None,
) -> tuple[list[Due], dict[str, dict[str, float | None]]]:
    """(what is due to unload, soonest first; each engine's models with when each will
    unload, None for one that will not: kept loaded, never, or in use). `ended`: when a
    job of each (engine identity, model) last ended, which a heartbeat sent before it
    does not yet count as a use."""
    ended = ended or {}
    due: list[Due] = []
    shown: dict[str, dict[str, float | None]] = {}
    for engine in engines:
        running = {job.entry.id for job in engine.jobs.values()}
        when: dict[str, float | None] = {}
        for r in engine.residents:
            model = str(r["model"])
            keep = keep_alive_of(model)
            in_use = bool(r["busy"]) or model in running or waiting(model)
            # kept: by this front's catalogue (keep_alive_of), or by the spec the engine
            # was sent (a head's model on a node)
            kept = keep < 0 or bool(r.get("kept"))
            if kept or in_use or (model in when and when[model] is None):
                when[model] = None  # one instance in use keeps the model
                continue
            used = max(engine.residents_at - float(r["idle_for"]),
                       ended.get((engine.identity, model), -math.inf))  # fmt: skip
            at = used + keep
            if model not in when or at > (when[model] or at):
                when[model] = at  # the instance used last decides
        shown[engine.name] = when
        due.extend(Due(engine, m, at) for m, at in when.items() if at is not None)
    return sorted(due, key=lambda d: d.at), shown


@dataclass
class IdleKeeper:
    """The one owner of the unloads asked for, so that one is not asked again at every
    pass while its engine has not yet reported it gone."""

    #: (engine identity, epoch, model) -> when it was asked (monotonic)
    asked: dict[tuple[bytes, int, str], float] = field(default_factory=dict)
    #: each engine's models with when each unloads (monotonic; None: it does not)
    schedule: dict[str, dict[str, float | None]] = field(default_factory=dict)
    #: (engine identity, model) -> when a job of it last ended there (monotonic)
    ended: dict[tuple[bytes, str], float] = field(default_factory=dict)

    def used(self, engine: EngineRecord, model: str, now: float) -> None:
        """A job of this model ended on this engine now: its idleness starts here."""
        self.ended[(engine.identity, model)] = now

    def unloads_at(self, unix_now: float, now: float) -> dict[str, dict[str, float | None]]:
        """The schedule in unix time, as the console shows it."""
        return {
            engine: {m: None if at is None else unix_now + (at - now) for m, at in models.items()}
            for engine, models in self.schedule.items()
        }

    def sweep(
        self,
        engines: list[EngineRecord],
        keep_alive_of: Callable[[str], float],
        waiting: Callable[[str], bool],
        now: float,
        again_after: float,
    ) -> list[tuple[EngineRecord, str]]:
        """What to unload now: due models not asked for within `again_after` seconds
        (an engine may have found the model busy, and keeps it)."""
        due, self.schedule = schedule(engines, keep_alive_of, waiting, self.ended)
        live = {(e.identity, e.epoch) for e in engines}
        identities = {e.identity for e in engines}
        self.ended = {k: at for k, at in self.ended.items() if k[0] in identities}
        self.asked = {k: at for k, at in self.asked.items()
                      if k[:2] in live and now - at < again_after}  # fmt: skip
        out = []
        for item in due:
            if item.at > now:
                break
            key = (item.engine.identity, item.engine.epoch, item.model)
            if key not in self.asked:
                self.asked[key] = now
                out.append((item.engine, item.model))
        return out
