"""NVIDIA GPUs on this machine, read through NVML (pynvml), behind an interface so tests
can describe any machine. The front reads only this; it never touches CUDA."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("coderai.front")


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    memory_total: int


class GpuSensor(Protocol):
    def nvidia_gpus(self) -> list[GpuInfo]: ...


class NvmlSensor:
    def nvidia_gpus(self) -> list[GpuInfo]:
        import pynvml

        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound: no NVIDIA driver
            log.info("no NVIDIA GPU found (%s)", exc)
            return []
        try:
            gpus = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                gpus.append(
                    GpuInfo(
                        index=i,
                        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                        name=_text(pynvml.nvmlDeviceGetName(handle)),
                        memory_total=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    )
                )
            return gpus
        finally:
            pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
