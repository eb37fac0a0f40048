"""When an engine must pause to cool, and when it may go on: a pure decision over one set
of sensor readings, with hysteresis (a pause starts at `high` and ends only at `resume`,
so a temperature near one threshold does not flap).

The CPU is one reading for every engine: too hot pauses them all. A GPU pauses only the
engine that owns it; an engine with several cards pauses while any of them is hot. Each
card is judged by its vendor's thresholds (`gpu_overrides`), else the GPU defaults.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from coderai.engine.machine.readings import Readings


@dataclass(frozen=True)
class Limits:
    high: float
    resume: float


@dataclass(frozen=True)
class ThermalPolicy:
    cpu: Limits = Limits(90.0, 80.0)
    gpu: Limits = Limits(85.0, 75.0)
    #: per vendor ("nvidia", "amd", …)
    gpu_overrides: dict[str, Limits] = field(default_factory=dict)

    def for_vendor(self, vendor: str) -> Limits:
        return self.gpu_overrides.get(vendor, self.gpu)

    @classmethod
    def from_settings(cls, data: dict[str, Any]) -> ThermalPolicy:
        """From the `thermal` settings the front sends (already validated there)."""
        overrides = {
            vendor: Limits(float(v["high"]), float(v["resume"]))
            for vendor, v in data.get("gpu_overrides", {}).items()
        }
        return cls(
            Limits(float(data["cpu_high"]), float(data["cpu_resume"])),
            Limits(float(data["gpu_high"]), float(data["gpu_resume"])),
            overrides,
        )


@dataclass(frozen=True)
class Cooldown:
    """Why an engine pauses: which sensor, which card, since when."""

    sensor: str  #: "cpu" or "gpu"
    card: str | None
    vendor: str | None
    temp: float
    high: float
    resume: float
    since: float

    def public(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _hot(readings: Readings, policy: ThermalPolicy, now: float) -> list[Cooldown]:
    """Every sensor at or over its `high` now, the CPU first."""
    hot = []
    cpu = readings.cpu_temp
    if cpu is not None and cpu >= policy.cpu.high:
        hot.append(Cooldown("cpu", None, None, cpu, policy.cpu.high, policy.cpu.resume, now))
    for card, gpu in sorted(readings.gpus.items()):
        limits = policy.for_vendor(gpu.vendor)
        if gpu.temp is not None and gpu.temp >= limits.high:
            hot.append(Cooldown("gpu", card, gpu.vendor, gpu.temp, limits.high, limits.resume, now))
    return hot


def _reading(readings: Readings, cooldown: Cooldown) -> float | None:
    if cooldown.sensor == "cpu":
        return readings.cpu_temp
    gpu = readings.gpus.get(cooldown.card or "")
    return gpu.temp if gpu is not None else None


def next_cooldown(
    current: Cooldown | None, readings: Readings, policy: ThermalPolicy, now: float
) -> Cooldown | None:
    """The cooldown after these readings: the current one while its sensor is above its
    resume threshold (its temperature updated), else the first sensor now too hot, else
    none. A sensor that stops reporting ends its cooldown: a guard that cannot see must
    not stop the engine for good."""
    if current is not None:
        temp = _reading(readings, current)
        if temp is not None and temp > current.resume:
            return dataclasses.replace(current, temp=temp)
    hot = _hot(readings, policy, now)
    return hot[0] if hot else None
