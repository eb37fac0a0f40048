"""AMD cards as the amdgpu driver shows them in sysfs: temperature (hwmon, millidegrees)
and VRAM (`mem_info_vram_total`, `mem_info_vram_used`, bytes).

An engine owns Vulkan devices by index (`vulkan:N`, from GGML_VK_VISIBLE_DEVICES); the
N-th AMD card in DRM order is taken for device N. That is how Mesa's RADV numbers a
machine's AMD cards when no other vendor's Vulkan device comes first; a mixed machine
should name its engines' cards in a readings file instead. The root is injectable, so
tests read a tree made in a temporary folder.
"""

from __future__ import annotations

from pathlib import Path

from coderai.engine.machine.readings import GpuReading

DRM = Path("/sys/class/drm")
AMD_VENDOR = "0x1002"
MIB = 1 << 20


def amd_devices(root: Path = DRM) -> list[Path]:
    """The `device` folders of the AMD cards, in DRM order (card0, card1, …)."""
    cards = sorted(
        (p for p in root.glob("card*") if p.name[4:].isdigit()), key=lambda p: int(p.name[4:])
    )
    out = []
    for card in cards:
        try:
            vendor = (card / "device" / "vendor").read_text().strip()
        except OSError:
            continue
        if vendor == AMD_VENDOR:
            out.append(card / "device")
    return out


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_device(device: Path) -> GpuReading:
    temps = [_read_int(p) for p in sorted(device.glob("hwmon/hwmon*/temp1_input"))]
    temp = next((t / 1000 for t in temps if t is not None), None)
    total = _read_int(device / "mem_info_vram_total")
    used = _read_int(device / "mem_info_vram_used")
    return GpuReading(
        "amd",
        temp,
        total / MIB if total is not None else None,
        used / MIB if used is not None else None,
    )


def read_owned(owned: list[str], root: Path = DRM) -> dict[str, GpuReading]:
    """Readings of the `vulkan:N` cards among `owned`."""
    devices = amd_devices(root)
    out = {}
    for card in owned:
        index = card.removeprefix("vulkan:")
        if card.startswith("vulkan:") and index.isdigit() and int(index) < len(devices):
            out[card] = read_device(devices[int(index)])
    return out
