"""Which engine runs a model: pure functions over plain records.

Ownership is decided once per catalogue and engine set: each routable id (alias, else
path, else id) gets one owner engine, by pin, then the default engine, then balanced
round-robin over the engines that can run its format. At request time the owner serves
when it is up and able; otherwise the request goes to an engine that already has the model,
then the default engine, then the least loaded compatible engine.

A model with replicas (`replicas: N`, or `engines: [...]`) has a replica set instead: its
owner first, then the able engines holding the fewest models so far; requests are routed
among the set by replicas.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar


@dataclass(frozen=True)
class ModelView:
    model_id: str
    route_key: str
    #: what an engine must run; None when the model's file cannot be read yet
    capability: str | None
    pin: str | None = None
    #: how many engines run it (1: one owner)
    replicas: int = 1
    #: or exactly these engines
    engines: tuple[str, ...] | None = None


@dataclass(frozen=True)
class EngineAbility:
    name: str
    capabilities: frozenset[str]


@dataclass
class Assignment:
    #: route key -> owner engine name
    owners: dict[str, str] = field(default_factory=dict)
    #: model id -> why its pin is not honoured (or why it has no owner)
    warnings: dict[str, str] = field(default_factory=dict)
    #: route key -> the engines of a model with replicas, its owner first (only for one
    #: that asks for several)
    replicas: dict[str, tuple[str, ...]] = field(default_factory=dict)


def assign_owners(
    models: list[ModelView], engines: list[EngineAbility], default_engine: str | None
) -> Assignment:
    out = Assignment()
    names = {e.name: e for e in engines}
    load = {e.name: 0 for e in engines}
    for model in models:
        if model.route_key in out.owners or model.capability is None:
            continue  # entries sharing a path (and no alias) share one owner
        able = [e for e in engines if model.capability in e.capabilities]
        if model.engines is not None:
            _place_listed(out, load, model, names)
            continue
        if model.pin is not None:
            pinned = names.get(model.pin)
            if pinned is None:
                out.warnings[model.model_id] = (
                    f"pinned engine {model.pin!r} does not exist"
                    f" (engines: {', '.join(names) or 'none'})"
                )
            elif model.capability not in pinned.capabilities:
                out.warnings[model.model_id] = (
                    f"pinned engine {model.pin!r} cannot run {model.capability} models"
                )
            else:
                _own(out, load, model, model.pin)
                continue
        if not able:
            out.warnings.setdefault(model.model_id, f"no engine can run {model.capability} models")
            continue
        if default_engine in {e.name for e in able}:
            _own(out, load, model, str(default_engine))
            continue
        # balanced: the able engine with the fewest models so far (first on ties)
        _own(out, load, model, min(able, key=lambda e: load[e.name]).name)
    for model in models:
        owner = out.owners.get(model.route_key)
        if model.replicas > 1 and owner is not None and model.route_key not in out.replicas:
            _add_replicas(out, load, model, owner, engines)
    return out


def _place_listed(
    out: Assignment, load: dict[str, int], model: ModelView, names: dict[str, EngineAbility]
) -> None:
    """An entry's `engines`: those that exist and can run it, in its order."""
    assert model.engines is not None and model.capability is not None
    chosen, problems = [], []
    for name in model.engines:
        engine = names.get(name)
        if engine is None:
            problems.append(f"engine {name!r} does not exist")
        elif model.capability not in engine.capabilities:
            problems.append(f"engine {name!r} cannot run {model.capability} models")
        else:
            chosen.append(name)
    if problems:
        out.warnings[model.model_id] = "; ".join(problems)
    if chosen:
        _own(out, load, model, chosen[0])
        for name in chosen[1:]:
            load[name] += 1
        if len(chosen) > 1:  # one engine: it owns the model, as a pin would
            out.replicas[model.route_key] = tuple(chosen)


def _add_replicas(
    out: Assignment,
    load: dict[str, int],
    model: ModelView,
    owner: str,
    engines: list[EngineAbility],
) -> None:
    """A model's further replicas, after its owner: the able engines with the fewest
    models so far (in their order on ties)."""
    able = [e.name for e in engines if model.capability in e.capabilities and e.name != owner]
    more = sorted(able, key=lambda name: load[name])[: model.replicas - 1]
    for name in more:
        load[name] += 1
    if more:
        out.replicas[model.route_key] = (owner, *more)
    if len(more) < model.replicas - 1:
        able_count = 1 + len(more)
        out.warnings.setdefault(
            model.model_id,
            f"asks for {model.replicas} replicas; {able_count} "
            f"engine{'s' if able_count > 1 else ''} can run it",
        )


def _own(out: Assignment, load: dict[str, int], model: ModelView, engine: str) -> None:
    out.owners[model.route_key] = engine
    load[engine] += 1


class Capable(Protocol):
    @property
    def capabilities(self) -> frozenset[str]: ...


C = TypeVar("C", bound=Capable)


def compatible(capability: str, engines: Iterable[C]) -> list[C]:
    return [e for e in engines if capability in e.capabilities]


@dataclass(frozen=True)
class Candidate:
    """An engine as request-time routing sees it, frozen at the moment of the decision."""

    name: str
    capabilities: frozenset[str]
    #: models it holds or is loading
    resident: frozenset[str]
    free: int
    loaded: int


def route(
    capability: str,
    model_id: str,
    owner: str | None,
    default_engine: str | None,
    engines: Iterable[Candidate],
) -> Candidate | None:
    """The engine a request for this model should wait for, whether or not it has a free
    slot now; None when no running engine can run it."""
    able = compatible(capability, engines)
    if not able:
        return None
    for engine in able:
        if engine.name == owner:
            return engine
    resident = [e for e in able if model_id in e.resident]
    if resident:
        return max(resident, key=lambda e: e.free)
    for engine in able:
        if engine.name == default_engine:
            return engine
    return max(able, key=lambda e: (e.free, -e.loaded))
