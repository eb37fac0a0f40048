"""When an engine pauses to cool and when it goes on: hysteresis, CPU versus GPU, vendor
thresholds, and the readings file that stands in for the sensors."""

from __future__ import annotations

import json
from pathlib import Path

from coderai.config import ThermalConfig
from coderai.engine.machine.readings import GpuReading, Readings, free_vram_bytes
from coderai.engine.machine.sensors import ReadingsFile
from coderai.engine.machine.thermal import Limits, ThermalPolicy, next_cooldown

POLICY = ThermalPolicy(
    cpu=Limits(90, 80), gpu=Limits(85, 75), gpu_overrides={"amd": Limits(95, 92)}
)


def gpu(temp: float, vendor: str = "nvidia") -> GpuReading:
    return GpuReading(vendor, temp)


def test_a_pause_starts_at_high_and_ends_only_at_resume() -> None:
    hot = next_cooldown(None, Readings(50, {"GPU-a": gpu(85)}), POLICY, now=10.0)
    assert hot is not None and (hot.sensor, hot.card, hot.since) == ("gpu", "GPU-a", 10.0)
    # between resume and high it stays paused, its temperature updated
    warm = next_cooldown(hot, Readings(50, {"GPU-a": gpu(80)}), POLICY, now=11.0)
    assert warm is not None and warm.temp == 80 and warm.since == 10.0
    assert next_cooldown(warm, Readings(50, {"GPU-a": gpu(75)}), POLICY, now=12.0) is None
    # and a card between the thresholds that was not hot does not start one
    assert next_cooldown(None, Readings(50, {"GPU-a": gpu(84)}), POLICY, now=13.0) is None


def test_the_cpu_is_judged_first_and_any_hot_card_pauses_its_engine() -> None:
    both = next_cooldown(None, Readings(95, {"GPU-a": gpu(99)}), POLICY, now=0.0)
    assert both is not None and both.sensor == "cpu" and both.card is None
    second = next_cooldown(None, Readings(40, {"a": gpu(50), "b": gpu(88)}), POLICY, now=0.0)
    assert second is not None and second.card == "b"


def test_a_vendor_override_applies_to_that_vendors_cards_only() -> None:
    readings = Readings(40, {"amd-card": gpu(91, "amd"), "nv-card": gpu(80)})
    assert next_cooldown(None, readings, POLICY, now=0.0) is None
    hot = next_cooldown(None, Readings(40, {"amd-card": gpu(96, "amd")}), POLICY, now=0.0)
    assert hot is not None and (hot.high, hot.resume, hot.vendor) == (95, 92, "amd")


def test_a_sensor_that_stops_reporting_ends_its_pause() -> None:
    hot = next_cooldown(None, Readings(50, {"GPU-a": gpu(90)}), POLICY, now=0.0)
    assert next_cooldown(hot, Readings(50, {}), POLICY, now=1.0) is None


def test_the_policy_is_built_from_the_settings_the_front_sends() -> None:
    settings = ThermalConfig.model_validate(
        {"gpu_overrides": {"amd": {"high": 95, "resume": 92}}}
    ).model_dump()
    policy = ThermalPolicy.from_settings(settings)
    assert policy.cpu == Limits(90, 80) and policy.for_vendor("amd") == Limits(95, 92)
    assert policy.for_vendor("nvidia") == Limits(85, 75)


def test_the_readings_file_is_read_again_each_time_for_the_cards_owned(tmp_path: Path) -> None:
    path = tmp_path / "sensors.json"
    sensors = ReadingsFile(path, ["GPU-a"])
    assert sensors.read() == Readings()  # no file yet: no readings, no guard
    path.write_text(json.dumps({"cpu": {"temp": 55}, "gpus": {
        "GPU-a": {"vendor": "nvidia", "temp": 91, "vram_total_mb": 24576, "vram_used_mb": 1200},
        "GPU-b": {"vendor": "nvidia", "temp": 99},
    }}))  # fmt: skip
    readings = sensors.read()
    assert readings.cpu_temp == 55 and list(readings.gpus) == ["GPU-a"]
    assert readings.gpus["GPU-a"] == GpuReading("nvidia", 91, 24576, 1200)
    path.write_text(json.dumps({"cpu": {"temp": 60}}))
    assert sensors.read() == Readings(60, {})
    path.write_text("{not json")
    assert sensors.read() == Readings()


def test_free_vram_is_summed_over_the_cards_that_report_it() -> None:
    cards = {
        "a": GpuReading("nvidia", 50, vram_total_mb=1000, vram_used_mb=250),
        "b": GpuReading("amd", 50, vram_total_mb=500, vram_used_mb=500),
        "c": GpuReading("nvidia", 50),  # no VRAM figures: not counted
    }
    assert free_vram_bytes(Readings(40, cards)) == 750 * 2**20
    assert free_vram_bytes(Readings(40, {"c": cards["c"]})) is None
    assert free_vram_bytes(Readings(40)) is None
