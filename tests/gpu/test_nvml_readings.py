"""On a machine with an NVIDIA GPU: the engine's heartbeat reports the card's VRAM as NVML
does. Skipped where NVML finds no card (this project's CI machines)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.server import Server, wait_for

pytestmark = pytest.mark.gpu


def nvidia_cards() -> list[tuple[str, int, int]]:
    """(uuid, total bytes, used bytes) of each card NVML sees; [] without any."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return []
    cards = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        cards.append((uuid if isinstance(uuid, str) else uuid.decode(), memory.total, memory.used))
    return cards


def test_the_heartbeat_reports_each_cards_vram_as_nvml_does(tmp_path: Path) -> None:
    cards = nvidia_cards()
    if not cards:
        pytest.skip("no NVIDIA GPU here")
    uuid, total, _ = cards[0]
    spec = {"name": "gpu0", "backend": "nvidia", "capabilities": ["fake"],
            "env": {"CUDA_VISIBLE_DEVICES": uuid}}  # fmt: skip
    models: list[dict[str, Any]] = [{"id": "m", "format": "fake"}]
    srv = Server(tmp_path, {"engine_specs": [spec], "heartbeat_interval": 0.2}, models)
    try:
        srv.wait_ready(1)

        def readings() -> dict[str, Any]:
            engine = srv.health()["engines"][0]
            found: dict[str, Any] = engine.get("gpu_readings", {}).get(uuid, {})
            return found

        wait_for(lambda: readings().get("vram_total_mb") is not None)
        reading = readings()
        assert reading["vendor"] == "nvidia"
        assert reading["vram_total_mb"] == pytest.approx(total / (1 << 20))
        assert 0 <= reading["vram_used_mb"] <= reading["vram_total_mb"]
        assert reading["temp"] is not None and 0 < reading["temp"] < 120
    finally:
        srv.stop()
