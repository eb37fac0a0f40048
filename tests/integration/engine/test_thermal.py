"""Thermal pauses with real engines, fed by the readings file that stands in for the
sensors: a hot GPU pauses only the engine that owns it, a hot CPU pauses every engine, a
vendor's thresholds apply to its cards only, and no client sees an error."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import Server, wait_for
from tests.support.sse import DONE, event, is_error

KEY = "thermal-admin-key"
INTERVAL = 0.2
ENGINES = [
    {"name": "alpha", "backend": "nvidia", "capabilities": ["fake"],
     "env": {"CUDA_VISIBLE_DEVICES": "GPU-a"}},
    {"name": "beta", "backend": "vulkan", "capabilities": ["fake"],
     "env": {"GGML_VK_VISIBLE_DEVICES": "0"}},
]  # fmt: skip
PACE = {"tokens_per_second": 40, "output_tokens": 100_000}
MODELS: list[dict[str, Any]] = [
    {"id": "on-alpha", "format": "fake", "engine": "alpha", "options": PACE},
    {"id": "on-beta", "format": "fake", "engine": "beta", "options": PACE},
]
#: beta's card is an AMD one, allowed hotter than the GPU default
THERMAL = {"gpu_high": 85, "gpu_resume": 75, "gpu_overrides": {"amd": {"high": 95, "resume": 92}}}


class Sensors:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.set(cpu=50, alpha=50, beta=50)

    def set(self, cpu: float, alpha: float, beta: float) -> None:
        readings = {
            "cpu": {"temp": cpu},
            "gpus": {
                "GPU-a": {"vendor": "nvidia", "temp": alpha, "vram_total_mb": 24576,
                          "vram_used_mb": 1200},
                "vulkan:0": {"vendor": "amd", "temp": beta, "vram_total_mb": 16368,
                             "vram_used_mb": 512},
            },
        }  # fmt: skip
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(readings))
        tmp.replace(self.path)  # engines never read half a file


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Sensors]]:
    folder = tmp_path_factory.mktemp("thermal")
    sensors = Sensors(folder / "sensors.json")
    srv = Server(
        folder / "server",
        {"engine_specs": ENGINES, "heartbeat_interval": INTERVAL},
        MODELS,
        env={"CODERAI_SENSORS_FILE": str(sensors.path)},
        extra_config={"auth": {"admin_key": KEY}, "thermal": THERMAL},
    )
    try:
        srv.wait_ready(2)
        yield srv, sensors
    finally:
        srv.stop()


class Stream:
    """A streamed chat read on its own thread: when each token arrived, how it ended."""

    def __init__(self, srv: Server, model: str, tokens: int) -> None:
        self.arrivals: list[float] = []
        self.events: list[dict[str, Any]] = []
        body = {"model": model, "stream": True, "max_tokens": tokens,
                "messages": [{"role": "user", "content": "warm"}]}  # fmt: skip
        self.thread = threading.Thread(target=self._read, args=(srv, body), daemon=True)
        self.thread.start()

    def _read(self, srv: Server, body: dict[str, Any]) -> None:
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                e = event(line)
                if e is None:
                    continue
                self.events.append(e)
                if any((c.get("delta") or {}).get("content") for c in e.get("choices", [])):
                    self.arrivals.append(time.monotonic())

    def count(self) -> int:
        return len(self.arrivals)

    def ended_cleanly(self) -> bool:
        self.thread.join(60)
        return bool(self.events) and self.events[-1] == DONE and not any(map(is_error, self.events))


def states(srv: Server) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in srv.health()["engines"]}


def test_a_hot_gpu_pauses_only_its_engine_until_it_cools(rig: tuple[Server, Sensors]) -> None:
    srv, sensors = rig
    a, b = Stream(srv, "on-alpha", 160), Stream(srv, "on-beta", 160)
    wait_for(lambda: a.count() > 3 and b.count() > 3)
    # alpha's NVIDIA card over the GPU default; beta's AMD card as hot, under its override
    sensors.set(cpu=50, alpha=91, beta=91)
    wait_for(lambda: states(srv)["alpha"]["state"] == "cooling")
    alpha = states(srv)["alpha"]
    assert alpha["cooldown"]["sensor"] == "gpu" and alpha["cooldown"]["card"] == "GPU-a"
    assert states(srv)["beta"]["state"] == "ready" and states(srv)["beta"]["cooldown"] is None
    paused_at = a.count()
    b_at = b.count()
    wait_for(lambda: b.count() >= b_at + 20)  # beta streams on at its pace...
    assert a.count() <= paused_at + 2  # ...while alpha's tokens stopped (a step in flight)
    # between the thresholds alpha stays paused; below resume it goes on
    sensors.set(cpu=50, alpha=80, beta=50)
    wait_for(lambda: b.count() >= b_at + 30)
    assert states(srv)["alpha"]["state"] == "cooling"
    sensors.set(cpu=50, alpha=70, beta=50)
    wait_for(lambda: states(srv)["alpha"]["state"] == "ready")
    wait_for(lambda: a.count() >= paused_at + 10)
    assert a.ended_cleanly() and b.ended_cleanly()


def test_a_hot_cpu_pauses_every_engine(rig: tuple[Server, Sensors]) -> None:
    srv, sensors = rig
    a, b = Stream(srv, "on-alpha", 60), Stream(srv, "on-beta", 60)
    wait_for(lambda: a.count() > 3 and b.count() > 3)
    sensors.set(cpu=95, alpha=50, beta=50)
    wait_for(lambda: all(e["state"] == "cooling" for e in states(srv).values()))
    assert {e["cooldown"]["sensor"] for e in states(srv).values()} == {"cpu"}
    counts = a.count(), b.count()
    # several heartbeat intervals with the CPU hot: neither stream moves
    deadline = time.monotonic() + 5 * INTERVAL
    wait_for(lambda: time.monotonic() > deadline)
    assert a.count() <= counts[0] + 2 and b.count() <= counts[1] + 2
    sensors.set(cpu=60, alpha=50, beta=50)
    assert a.ended_cleanly() and b.ended_cleanly()


def test_the_console_status_names_the_cooling_engine_and_each_cards_vram(
    rig: tuple[Server, Sensors],
) -> None:
    srv, sensors = rig
    sensors.set(cpu=50, alpha=90, beta=50)
    wait_for(lambda: states(srv)["alpha"]["state"] == "cooling")
    headers = {"Authorization": f"Bearer {KEY}"}
    status = httpx.get(srv.url + "/admin/api/status", headers=headers).json()
    assert list(status["cooldowns"]) == ["alpha"]
    assert status["cooldowns"]["alpha"]["temp"] == 90
    assert status["vram"]["alpha"]["cards"] == {"GPU-a": {"total_mb": 24576, "used_mb": 1200}}
    assert status["vram"]["beta"]["total_mb"] == 16368
    sensors.set(cpu=50, alpha=50, beta=50)
    wait_for(lambda: states(srv)["alpha"]["state"] == "ready")


def test_thermal_thresholds_are_live_settings_per_gpu_vendor(rig: tuple[Server, Sensors]) -> None:
    srv, sensors = rig
    headers = {"Authorization": f"Bearer {KEY}"}
    settings = httpx.get(srv.url + "/admin/api/settings", headers=headers).json()
    assert sorted(settings["gpu_vendors"]) == ["amd", "nvidia"]
    assert "thermal.gpu_overrides" in settings["live"]
    sensors.set(cpu=50, alpha=50, beta=91)  # under the AMD override (95): beta serves
    wait_for(lambda: states(srv)["beta"]["gpu_readings"]["vulkan:0"]["temp"] == 91)
    assert states(srv)["beta"]["state"] == "ready"
    lowered = {"thermal.gpu_overrides": {"amd": {"high": 90, "resume": 85}}}
    answer = httpx.patch(srv.url + "/admin/api/settings", json=lowered, headers=headers)
    assert answer.status_code == 200 and answer.json()["applied"] == ["thermal.gpu_overrides"]
    wait_for(lambda: states(srv)["beta"]["state"] == "cooling")
    assert states(srv)["beta"]["cooldown"]["high"] == 90
    assert states(srv)["alpha"]["state"] == "ready"  # an AMD threshold: NVIDIA cards unmoved
    restore = {"thermal.gpu_overrides": THERMAL["gpu_overrides"]}
    httpx.patch(srv.url + "/admin/api/settings", json=restore, headers=headers)
    sensors.set(cpu=50, alpha=50, beta=50)
    wait_for(lambda: states(srv)["beta"]["state"] == "ready")


def test_metrics_show_each_cards_readings_and_who_cools(rig: tuple[Server, Sensors]) -> None:
    srv, sensors = rig
    sensors.set(cpu=50, alpha=88, beta=60)
    wait_for(lambda: states(srv)["alpha"]["state"] == "cooling")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(httpx.get(srv.url + "/metrics").text)
        for s in family.samples
    }
    alpha = (("card", "GPU-a"), ("engine", "alpha"), ("vendor", "nvidia"))
    beta = (("card", "vulkan:0"), ("engine", "beta"), ("vendor", "amd"))
    assert samples[("coderai_engine_cooling", (("engine", "alpha"), ("sensor", "gpu")))] == 1
    assert not any(k[0] == "coderai_engine_cooling" and ("engine", "beta") in k[1] for k in samples)
    assert samples[("coderai_gpu_temperature_celsius", alpha)] == 88
    assert samples[("coderai_gpu_vram_total_bytes", alpha)] == 24576 * (1 << 20)
    assert samples[("coderai_gpu_vram_used_bytes", beta)] == 512 * (1 << 20)
    sensors.set(cpu=50, alpha=50, beta=50)
    wait_for(lambda: states(srv)["alpha"]["state"] == "ready")
