"""How much of each GPU a model may take: a pure function of the cards and the model's
options, handed to accelerate as `device_map` + `max_memory`."""

from __future__ import annotations

from typing import Any

GIB = 1 << 30
#: share of a card used when the model entry sets no limit (room for activations, cache)
DEFAULT_GPU_PERCENT = 90.0


def max_memory_plan(
    gpu_totals: list[int], options: dict[str, Any], cpu_bytes: int
) -> tuple[str, dict[int | str, int]] | None:
    """(device_map, max_memory) for the engine's visible GPUs, or None on a CPU-only engine.

    max_gpu_percent caps each card at a share of its memory; balanced_gpu_percent does the
    same and asks accelerate to spread layers evenly instead of filling cards in order;
    max_vram (GiB) caps the model's total over all cards, split in proportion to their size.
    What does not fit on the cards is offloaded to the CPU.
    """
    if not gpu_totals:
        return None
    balanced = options.get("balanced_gpu_percent")
    percent = float(balanced or options.get("max_gpu_percent") or DEFAULT_GPU_PERCENT)
    if not 0 < percent <= 100:
        raise ValueError(f"GPU percent must be in (0, 100], got {percent}")
    caps = [total * percent / 100 for total in gpu_totals]
    max_vram = options.get("max_vram")
    if max_vram is not None:
        whole = sum(gpu_totals)
        caps = [
            min(cap, float(max_vram) * GIB * total / whole)
            for cap, total in zip(caps, gpu_totals, strict=True)
        ]
    plan: dict[int | str, int] = {i: int(cap) for i, cap in enumerate(caps)}
    plan["cpu"] = cpu_bytes
    return ("balanced" if balanced else "auto"), plan
