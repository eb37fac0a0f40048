"""What an engine reads of its machine, as plain values: each GPU's temperature and VRAM,
the CPU's temperature. Apart from the readers (sensors.py, amd_sysfs.py) that make them and
the decisions (thermal.py, the worker's room for a load) that use them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuReading:
    vendor: str
    temp: float | None = None
    vram_total_mb: float | None = None
    vram_used_mb: float | None = None

    def public(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Readings:
    cpu_temp: float | None = None
    #: by the id the engine owns the card by
    gpus: dict[str, GpuReading] = field(default_factory=dict)


def free_vram_bytes(readings: Readings) -> int | None:
    """The VRAM free on the engine's cards, summed (a model is split over all of them);
    None when no card reports both figures (no GPU, or a sensor that gives none)."""
    free = [
        card.vram_total_mb - card.vram_used_mb
        for card in readings.gpus.values()
        if card.vram_total_mb is not None and card.vram_used_mb is not None
    ]
    return int(max(0.0, sum(free)) * (1 << 20)) if free else None
