"""Which idle models to unload so that the next load fits: least recently used first, and
never one that is generating."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResidentView:
    name: str
    size: int
    busy: bool
    last_used: float


def plan_evictions(residents: list[ResidentView], needed: int, free: int) -> list[str]:
    """Names to unload, oldest first, until `needed` bytes fit in `free` (plus what is
    unloaded). If even unloading every idle model is not enough, unload them all and let
    the load try: the estimate is rough and the OS or the GPU may still find room."""
    chosen: list[str] = []
    for resident in sorted((r for r in residents if not r.busy), key=lambda r: r.last_used):
        if free >= needed:
            break
        chosen.append(resident.name)
        free += resident.size
    return chosen
