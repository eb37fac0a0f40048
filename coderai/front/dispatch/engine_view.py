"""One view of each planned engine, built in one place from what the front knows: the plan,
the engine's record on the bus (if it has joined), and the supervisor's status (for a
process the front supervises). /healthz, the admin API and /metrics all render these, so
they cannot disagree about an engine's state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coderai.front.dispatch.deaths import Death
from coderai.front.dispatch.registry import EngineRecord
from coderai.front.engines.host import EngineStatus
from coderai.front.engines.plan import EnginePlan

#: engine states in which an engine takes requests (a loading engine serves its other
#: models; a cooling one holds them until it has cooled: delayed, never failed)
SERVING = frozenset({"ready", "loading", "cooling"})


@dataclass(frozen=True)
class EngineView:
    name: str
    backend: str
    capabilities: tuple[str, ...]
    gpus: tuple[str, ...]
    slots: int
    #: ready | loading | missing | draining on the bus; starting | restarting | backoff |
    #: dead off it
    state: str
    restarts: int = 0
    flapping: bool = False
    #: the rest is known only while the engine is on the bus
    pid: int | None = None
    epoch: int | None = None
    free_slots: int = 0
    in_flight: int = 0
    loaded_models: tuple[str, ...] = ()
    loading: dict[str, float] = field(default_factory=dict)
    rss: int = 0
    #: per model counters the engine reports (running, waiting, KV cells, prefix cache)
    models: dict[str, dict[str, int]] = field(default_factory=dict)
    #: why it pauses to cool (sensor, card, temperatures, since), if it does
    cooldown: dict[str, Any] | None = None
    #: per card it owns: vendor, temperature, VRAM total and used (MiB)
    gpu_readings: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: on another machine, joined over TCP with a CURVE key: never spawned by this front
    remote: bool = False
    #: its last death (how, doing what, when), kept across incarnations; None: none seen
    last_exit: Death | None = None
    #: what its backends decided about the machine (llama.cpp's extra buffer types: the
    #: machine's verdict and each model's, with why), from its last heartbeat
    kernels: dict[str, Any] = field(default_factory=dict)
    #: each resident model's idle unload (front/dispatch/idle.py): unix time, None for
    #: none (kept loaded, keep_alive -1, or in use)
    unloads: dict[str, float | None] = field(default_factory=dict)
    #: per model whose engine tells: how many conversations it holds the prefix of or
    #: runs, as its last heartbeat said (engine/holdings.py; cache-aware routing)
    holds: dict[str, int] = field(default_factory=dict)

    def vram(self) -> dict[str, Any] | None:
        """VRAM per card and summed, in MiB; None for an engine that reports no card."""
        cards = {
            card: {"total_mb": r.get("vram_total_mb"), "used_mb": r.get("vram_used_mb")}
            for card, r in self.gpu_readings.items()
        }
        if not cards:
            return None
        return {
            "cards": cards,
            "total_mb": sum(c["total_mb"] or 0 for c in cards.values()),
            "used_mb": sum(c["used_mb"] or 0 for c in cards.values()),
        }

    @property
    def serving(self) -> bool:
        return self.state in SERVING

    def public(self) -> dict[str, Any]:
        """The JSON form; `pid` and `epoch` appear only for an engine on the bus."""
        out: dict[str, Any] = {
            "name": self.name,
            "backend": self.backend,
            "capabilities": list(self.capabilities),
            "gpus": list(self.gpus),
            "state": self.state,
            "slots": self.slots,
            "free_slots": self.free_slots,
            "in_flight": self.in_flight,
            "loaded_models": list(self.loaded_models),
            "loading": self.loading,
            "rss": self.rss,
            "models": self.models,
            "restarts": self.restarts,
            "flapping": self.flapping,
            "cooldown": self.cooldown,
            "vram": self.vram(),
            "gpu_readings": self.gpu_readings,
            "remote": self.remote,
            "last_exit": self.last_exit.public() if self.last_exit is not None else None,
            "kernels": self.kernels,
            "unloads": self.unloads,
            "holds": self.holds,
        }
        if self.pid is not None:
            out["pid"], out["epoch"] = self.pid, self.epoch
        return out


def engine_state(record: EngineRecord | None, status: EngineStatus | None) -> str:
    if record is not None:
        if record.draining:
            return "draining"
        if record.missing:
            return "missing"
        return "cooling" if record.cooldown is not None else record.state
    if status is None or status.state == "stopped":
        return "dead"
    if status.state == "backoff":
        return "backoff"
    return "restarting" if status.restarts else "starting"


def engine_views(
    plans: list[EnginePlan],
    records: list[EngineRecord],
    statuses: dict[str, EngineStatus],
    deaths: dict[str, Death] | None = None,
    unloads: dict[str, dict[str, float | None]] | None = None,
) -> list[EngineView]:
    deaths = deaths or {}
    unloads = unloads or {}
    by_name = {r.name: r for r in records}
    views = []
    for plan in plans:
        record = by_name.get(plan.name)
        status = statuses.get(plan.name)
        common: dict[str, Any] = {
            "name": plan.name,
            "capabilities": tuple(plan.capabilities),
            "state": engine_state(record, status),
            "restarts": status.restarts if status else 0,
            "flapping": status.flapping if status else False,
            "last_exit": deaths.get(plan.name),
        }
        if record is None:
            views.append(EngineView(backend=plan.backend, gpus=tuple(plan.gpus),
                                    slots=plan.slots, **common))  # fmt: skip
            continue
        views.append(_on_the_bus(record, {**common, "unloads": unloads.get(plan.name, {})}))
    planned = {plan.name for plan in plans}
    for record in records:
        if record.name not in planned:  # joined from elsewhere: a remote engine
            common = {"name": record.name, "state": engine_state(record, None),
                      "last_exit": deaths.get(record.name),
                      "unloads": unloads.get(record.name, {})}  # fmt: skip
            views.append(_on_the_bus(record, common))
    return views


def _on_the_bus(record: EngineRecord, common: dict[str, Any]) -> EngineView:
    return EngineView(
        backend=record.backend,
        gpus=tuple(record.gpus),
        slots=record.slots,
        pid=record.pid,
        epoch=record.epoch,
        free_slots=record.free,
        in_flight=len(record.jobs),
        loaded_models=tuple(record.loaded),
        loading=dict(record.loading),
        rss=record.rss,
        models=record.models,
        cooldown=record.cooldown,
        gpu_readings=record.gpu_readings,
        remote=record.remote_key is not None,
        kernels=record.kernels,
        holds={model: len(held) for model, held in record.holds.items()},
        **{**common, "capabilities": tuple(sorted(record.capabilities))},
    )
