"""Checks of what arrives on the bus, at the edge (invariant 4): a body against its record's
declared field types, and the fields whose contents a type cannot say (a node's offered
models, a heartbeat's cooldown, readings, residents, counters and holds, thermal
thresholds). Each raises BusProtocolError naming the fault."""

from __future__ import annotations

import dataclasses
import math
import reprlib
import types
import typing
from dataclasses import dataclass
from typing import Any, TypeVar

from coderai.errors import BusProtocolError

R = TypeVar("R")


#: what a node may offer: the formats a catalogue entry may have, and how many models
#: with names how long (a node is trusted with its key, not with the head's memory)
OFFERED_FORMATS = ("fake", "gguf", "transformers")
MAX_OFFERED = 1024
MAX_NAME = 256


def offered_models(models: object) -> list[dict[str, Any]]:
    """A node's HELLO.models, checked: maps of an id, a known format and an optional
    alias (strings)."""
    if (
        not isinstance(models, list)
        or len(models) > MAX_OFFERED
        or not all(
            isinstance(m, dict)
            and isinstance(m.get("id"), str)
            and 0 < len(m["id"]) <= MAX_NAME
            and m.get("format") in OFFERED_FORMATS
            and (
                m.get("alias") is None
                or (isinstance(m["alias"], str) and len(m["alias"]) <= MAX_NAME)
            )
            for m in models
        )
    ):
        raise BusProtocolError(f"HELLO.models {models!r} is malformed")
    return models


def is_number(value: object, least: float = float("-inf"), *, above: bool = False) -> bool:
    """A finite number from msgpack (an int or a float, never a bool, never inf or nan) of
    at least `least` (with `above`, more than it): the one check every numeric field takes
    at the edge."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return value > least if above else value >= least


def cooldown_of(cooldown: object) -> dict[str, Any] | None:
    """A HEARTBEAT's cooldown, checked: None, or the sensor that is hot and since when."""
    if cooldown is None:
        return None
    if (
        not isinstance(cooldown, dict)
        or cooldown.get("sensor") not in ("cpu", "gpu")
        or not is_number(cooldown.get("since"))
    ):
        raise BusProtocolError(f"HEARTBEAT.cooldown {cooldown!r} is malformed")
    return cooldown


def gpu_readings(gpus: object) -> dict[str, dict[str, Any]]:
    """A HEARTBEAT's per-card readings, checked: ids to maps of a vendor and numbers
    (None where the card gives no reading)."""
    if not isinstance(gpus, dict) or not all(
        isinstance(card, str)
        and isinstance(reading, dict)
        and isinstance(reading.get("vendor"), str)
        and all(
            reading.get(k) is None or is_number(reading.get(k))
            for k in ("temp", "vram_total_mb", "vram_used_mb")
        )
        for card, reading in gpus.items()
    ):
        raise BusProtocolError(f"HEARTBEAT.gpus {gpus!r} is malformed")
    return gpus


def residents_of(residents: object) -> list[dict[str, Any]]:
    """A HEARTBEAT's resident models, checked."""
    if not isinstance(residents, list) or not all(
        isinstance(r, dict)
        and isinstance(r.get("model"), str)
        and isinstance(r.get("busy"), bool)
        and is_number(r.get("mb"), 0)
        and is_number(r.get("idle_for"), 0)
        # its facts (catalogue/model_facts.py), from engines that report them
        and type(r.get("context", 0)) is int
        and r.get("context", 0) >= 0
        and all(isinstance(r.get(k, False), bool) for k in ("tools", "reasoning", "vision", "kept"))
        for r in residents
    ):
        raise BusProtocolError(f"HEARTBEAT.residents {residents!r} is malformed")
    return residents


def kernels_of(kernels: object) -> dict[str, Any]:
    """A HEARTBEAT's kernel decisions, checked: llama.cpp's extra buffer types (the
    machine's verdict and each model's) and each model's attention kernel (flash attention
    on or off), each on or off with why in words."""

    def decision(d: object) -> bool:
        return (
            isinstance(d, dict) and isinstance(d.get("on"), bool) and isinstance(d.get("why"), str)
        )

    def models(part: dict[str, Any]) -> bool:
        listed = part.get("models", {})
        return isinstance(listed, dict) and all(
            isinstance(m, str) and decision(d) for m, d in listed.items()
        )

    repack = kernels.get("extra_buffer_types", {}) if isinstance(kernels, dict) else None
    attention = kernels.get("attention", {}) if isinstance(kernels, dict) else None
    if not (
        isinstance(kernels, dict)
        and isinstance(repack, dict)
        and ("machine" not in repack or decision(repack["machine"]))
        and models(repack)
        and isinstance(attention, dict)
        and models(attention)
    ):
        raise BusProtocolError(f"HEARTBEAT.kernels {kernels!r} is malformed")
    return kernels


def model_counters(models: dict[str, Any]) -> dict[str, dict[str, int]]:
    """A HEARTBEAT's per-model counters, checked: names to maps of names to integers."""
    for model, counters in models.items():
        if not isinstance(counters, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in counters.items()
        ):
            raise BusProtocolError(f"HEARTBEAT.models[{model!r}] is not a map of counters")
    return models


#: what one heartbeat may say an engine holds: per model this many affinities, each a
#: short hash (front/api/affinity.py makes them; engine/holdings.py sends REPORTED)
MAX_HELD = 1024
MAX_AFFINITY = 64


def holds_of(
    holds: dict[str, Any], cut: list[Any], taken: object
) -> tuple[dict[str, frozenset[str]], frozenset[str], int]:
    """A HEARTBEAT's holds (model ids to the affinities it holds), holds_cut (model ids)
    and `taken` (a job id), checked."""

    def model_id(model: object) -> bool:
        return isinstance(model, str) and 0 < len(model) <= MAX_NAME

    if type(taken) is not int or taken < 0:
        raise BusProtocolError(f"HEARTBEAT.taken {taken!r} is not a job id")
    if len(holds) > MAX_OFFERED or not all(
        model_id(model)
        and isinstance(held, list)
        and len(held) <= MAX_HELD
        and all(isinstance(a, str) and 0 < len(a) <= MAX_AFFINITY for a in held)
        for model, held in holds.items()
    ):
        raise BusProtocolError(f"HEARTBEAT.holds {reprlib.repr(holds)} is malformed")
    if len(cut) > MAX_OFFERED or not all(model_id(m) for m in cut):
        raise BusProtocolError(f"HEARTBEAT.holds_cut {reprlib.repr(cut)} is malformed")
    return {model: frozenset(held) for model, held in holds.items()}, frozenset(cut), taken


def check_thermal(thermal: object) -> None:
    def degrees(value: object) -> bool:
        return is_number(value, 0, above=True)

    if not isinstance(thermal, dict) or not all(
        degrees(thermal.get(k)) for k in ("cpu_high", "cpu_resume", "gpu_high", "gpu_resume")
    ):
        raise BusProtocolError(f"thermal {thermal!r} lacks a threshold")
    overrides = thermal.get("gpu_overrides", {})
    if not isinstance(overrides, dict) or not all(
        isinstance(v, dict) and degrees(v.get("high")) and degrees(v.get("resume"))
        for v in overrides.values()
    ):
        raise BusProtocolError(f"thermal.gpu_overrides {overrides!r} is malformed")


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    accepts: tuple[type, ...]
    required: bool


def _runtime_types(hint: Any) -> tuple[type, ...]:
    """The isinstance() classes that a field's annotation admits (containers unchecked)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        out: tuple[type, ...] = ()
        for arg in typing.get_args(hint):
            out += _runtime_types(arg)
        return out
    if hint is type(None):
        return (type(None),)
    base = origin or hint
    if base is float:
        return (float, int)  # msgpack keeps 1.0 as float, but peers may send ints
    if base is int:
        return (int,)
    return (base,)


def _specs(cls: type) -> tuple[FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    return tuple(
        FieldSpec(
            f.name,
            _runtime_types(hints[f.name]),
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )


#: each record class's field specs, made at its first body
_SPECS: dict[type, tuple[FieldSpec, ...]] = {}


def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    """What a record's body must hold: each field's name, the types it accepts, and
    whether it may be left out."""
    specs = _SPECS.get(cls)
    if specs is None:
        specs = _SPECS[cls] = _specs(cls)
    return specs


def record(cls: type[R], body: object) -> R:
    """The record of class `cls` (a message: its TYPE names it in errors) for a decoded
    body, or BusProtocolError naming the fault."""
    msg_type = cls.TYPE  # type: ignore[attr-defined]
    if not isinstance(body, dict):
        raise BusProtocolError(f"{msg_type.name} body is {type(body).__name__}, not a map")
    kwargs: dict[str, Any] = {}
    for spec in field_specs(cls):
        if spec.name not in body:
            if spec.required:
                raise BusProtocolError(f"{msg_type.name} lacks field {spec.name!r}")
            continue
        value = body[spec.name]
        # bool is an int subclass; a bool where a number is declared is a peer bug
        if not isinstance(value, spec.accepts) or (
            isinstance(value, bool) and bool not in spec.accepts
        ):
            raise BusProtocolError(
                f"{msg_type.name}.{spec.name} is {type(value).__name__}, "
                f"expected {'/'.join(t.__name__ for t in spec.accepts)}"
            )
        kwargs[spec.name] = value
    return cls(**kwargs)
