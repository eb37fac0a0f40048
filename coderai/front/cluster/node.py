"""A whole `coderai run` seen by its head as one engine: what it says in HELLO and in
each HEARTBEAT, built from its own engines (pure functions; uplink.py does the I/O).

The head routes by what the node advertises: the union of its engines' capabilities,
the sum of their slots, every card they own, the models loaded anywhere on it, and the
models of its own catalogue, which the head lists and pins to the node.
"""

from __future__ import annotations

from typing import Any

from coderai.bus.checker import OFFERED_FORMATS
from coderai.bus.kinds import EngineState, FailKind
from coderai.bus.messages import Fail, Heartbeat, Hello, ModelSpec
from coderai.catalogue.entries import ModelEntry
from coderai.errors import CoderaiError, ContextLengthExceeded, InvalidRequest, ModelFileError
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.engine_view import EngineView
from coderai.front.engines.plan import EnginePlan

BACKEND = "node"


def hello(
    name: str, epoch: int, pid: int, plans: list[EnginePlan], offered: list[dict[str, Any]]
) -> Hello:
    return Hello(
        name=name,
        epoch=epoch,
        pid=pid,
        backend=BACKEND,
        capabilities=sorted({c for p in plans for c in p.capabilities}),
        slots=sum(p.slots for p in plans),
        token="",  # a remote peer proves itself by its CURVE key
        gpus=[g for p in plans for g in p.gpus],
        models=offered,
    )


def offered(directory: ModelDirectory) -> list[dict[str, Any]]:
    """This node's catalogue as its head lists it: each usable model's id, format and
    alias (a model whose file failed its check is not offered)."""
    out = []
    for entry in directory.catalogue.entries:
        try:
            fmt = directory.format_of(entry)
        except ModelFileError:
            continue
        if fmt in OFFERED_FORMATS:
            out.append({"id": entry.id, "format": fmt, "alias": entry.alias})
    return out


def heartbeat(views: list[EngineView], front_rss: int) -> Heartbeat:
    """The node's engines as one: ready while any serves (a node whose engines are all
    away still queues what it is sent until one is back), cooling only when every
    serving engine cools."""
    serving = [v for v in views if v.serving]
    loaded = sorted({m for v in serving for m in v.loaded_models})
    loading: dict[str, float] = {}
    for view in serving:
        for model, progress in view.loading.items():
            loading[model] = max(progress, loading.get(model, 0.0))
    counters: dict[str, dict[str, int]] = {}
    for view in serving:
        for model, counts in view.models.items():
            mine = counters.setdefault(model, {})
            for name, value in counts.items():
                mine[name] = mine.get(name, 0) + value
    cooling = [v.cooldown for v in serving if v.cooldown is not None]
    cooldown = cooling[0] if serving and len(cooling) == len(serving) else None
    readings = {card: r for v in views for card, r in v.gpu_readings.items()}
    state = EngineState.LOADING if loading and not loaded else EngineState.READY
    return Heartbeat(
        state=state,
        loaded=loaded,
        loading=loading,
        rss=front_rss + sum(v.rss for v in views),
        models=counters,
        cooldown=cooldown,
        gpus=readings,
    )


def spec_entry(spec: ModelSpec) -> ModelEntry:
    """A catalogue entry for a model the head sends that this node's catalogue lacks."""
    return ModelEntry(id=spec.id, path=spec.path, format=spec.format, options=spec.options)


def fail_of(job_id: int, error: CoderaiError) -> Fail:
    """How a job the node could not run is told to its head: the head turns the kind
    back into the same answer (a 400 stays a 400)."""
    if isinstance(error, ContextLengthExceeded):
        kind = FailKind.CONTEXT_LENGTH
    elif isinstance(error, InvalidRequest):
        kind = FailKind.BAD_REQUEST
    elif isinstance(error, ModelFileError):
        kind = FailKind.MODEL_FILE
    else:
        kind = FailKind.MODEL_ERROR
    return Fail(job_id, kind, error.message)
