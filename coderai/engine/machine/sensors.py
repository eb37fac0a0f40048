"""What an engine reads of its machine: the CPU's temperature and, for each GPU it owns,
the card's vendor, temperature and VRAM. One interface, two sources:

- a readings file (`CODERAI_SENSORS_FILE`, re-read at each call) for tests and demos:
  `{"cpu": {"temp": 55}, "gpus": {"GPU-a": {"vendor": "nvidia", "temp": 91,
  "vram_total_mb": 24576, "vram_used_mb": 1200}}}`, GPUs keyed by the ids the engine
  owns (`CODERAI_ENGINE_GPUS`);
- the machine: psutil for the CPU, NVML (pynvml) for NVIDIA cards by UUID or index,
  sysfs for AMD cards (`vulkan:N`, see amd_sysfs.py).

Both fail soft: what cannot be read is None, said once in the log, and a guard without a
reading does nothing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from coderai.engine.machine.readings import GpuReading, Readings

log = logging.getLogger("coderai.engine")

SENSORS_FILE_ENV = "CODERAI_SENSORS_FILE"


class Sensors(Protocol):
    def read(self) -> Readings: ...


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


class ReadingsFile:
    """Readings from a JSON file, re-read each time; only the GPUs this engine owns."""

    def __init__(self, path: Path, owned: Sequence[str]) -> None:
        self.path = path
        self.owned = list(owned)
        self._complained = False

    def read(self) -> Readings:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            cpu = data.get("cpu") or {}
            gpus = data.get("gpus") or {}
            return Readings(
                cpu_temp=_number(cpu.get("temp")),
                gpus={
                    card: GpuReading(
                        vendor=str(gpus[card].get("vendor", "unknown")),
                        temp=_number(gpus[card].get("temp")),
                        vram_total_mb=_number(gpus[card].get("vram_total_mb")),
                        vram_used_mb=_number(gpus[card].get("vram_used_mb")),
                    )
                    for card in self.owned
                    if isinstance(gpus.get(card), dict)
                },
            )
        except (OSError, ValueError, AttributeError) as exc:
            if not self._complained:  # a file being rewritten reads again next time
                log.warning("sensor readings file %s cannot be read: %s", self.path, exc)
                self._complained = True
            return Readings()


class MachineSensors:
    """The real readers: psutil's CPU temperatures, NVML for NVIDIA cards, sysfs for AMD
    ones."""

    def __init__(self, owned: Sequence[str]) -> None:
        self.owned = [card for card in owned if not card.startswith("vulkan")]
        self.vulkan = [card for card in owned if card.startswith("vulkan:")]
        self._nvml: Any = None
        self._said: set[str] = set()
        if self.owned:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml = pynvml
            except Exception as exc:  # no driver, no library: no GPU readings
                self._once("nvml", f"no NVIDIA readings (NVML: {exc}); no GPU thermal guard")

    def _once(self, what: str, message: str) -> None:
        if what not in self._said:
            self._said.add(what)
            log.info(message)

    def read(self) -> Readings:
        return Readings(cpu_temp=self._cpu(), gpus=self._gpus())

    def _cpu(self) -> float | None:
        import psutil

        reader = getattr(psutil, "sensors_temperatures", None)
        temps = reader() if reader is not None else {}
        values = [t.current for entries in temps.values() for t in entries if t.current]
        if not values:
            self._once("cpu", "no CPU temperature sensor found; no CPU thermal guard")
            return None
        return float(max(values))

    def _gpus(self) -> dict[str, GpuReading]:
        from coderai.engine.machine.amd_sysfs import read_owned

        out = read_owned(self.vulkan) if self.vulkan else {}
        nvml = self._nvml
        if nvml is None:
            return out
        for card in self.owned:
            try:
                handle = (
                    nvml.nvmlDeviceGetHandleByIndex(int(card))
                    if card.isdigit()
                    else nvml.nvmlDeviceGetHandleByUUID(card)
                )
                temp = nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception as exc:
                self._once(f"gpu:{card}", f"GPU {card} cannot be read: {exc}")
                continue
            out[card] = GpuReading(
                "nvidia", float(temp), memory.total / (1 << 20), memory.used / (1 << 20)
            )
        return out


def sensors_for(owned: Sequence[str]) -> Sensors:
    path = os.environ.get(SENSORS_FILE_ENV)
    if path:
        return ReadingsFile(Path(path), owned)
    return MachineSensors(owned)
