"""AMD cards read from sysfs, here a tree made in a temporary folder as the amdgpu driver
lays it out (the hardware this machine lacks)."""

from __future__ import annotations

from pathlib import Path

from coderai.engine.machine.amd_sysfs import amd_devices, read_owned
from coderai.engine.machine.readings import GpuReading

MIB = 1 << 20


def card(root: Path, n: int, vendor: str, temp_milli: int | None = None,
         total: int | None = None, used: int | None = None) -> None:  # fmt: skip
    device = root / f"card{n}" / "device"
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    if temp_milli is not None:
        hwmon = device / "hwmon" / f"hwmon{n}"
        hwmon.mkdir(parents=True)
        (hwmon / "temp1_input").write_text(f"{temp_milli}\n")
    if total is not None:
        (device / "mem_info_vram_total").write_text(f"{total}\n")
    if used is not None:
        (device / "mem_info_vram_used").write_text(f"{used}\n")


def test_amd_cards_are_found_in_drm_order_and_others_skipped(tmp_path: Path) -> None:
    card(tmp_path, 10, "0x1002")
    card(tmp_path, 0, "0x10de")  # an NVIDIA card
    card(tmp_path, 2, "0x1002")
    (tmp_path / "card2-DP-1").mkdir()  # a connector, not a card
    assert [d.parent.name for d in amd_devices(tmp_path)] == ["card2", "card10"]


def test_an_engines_vulkan_devices_read_their_temperature_and_vram(tmp_path: Path) -> None:
    card(tmp_path, 0, "0x1002", 61_000, 16 * 1024 * MIB, 512 * MIB)
    card(tmp_path, 1, "0x1002")  # a card that reports nothing
    readings = read_owned(["vulkan:0", "vulkan:1", "vulkan:7", "GPU-x"], tmp_path)
    assert readings == {
        "vulkan:0": GpuReading("amd", 61.0, 16 * 1024, 512),
        "vulkan:1": GpuReading("amd", None, None, None),
    }
