"""A load that does not fit its engine's free VRAM unloads that engine's idle models
first, least recently used first, never one that is generating. The readings file stands
in for NVML: the test moves the card's used VRAM as each model lands on it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server, serving, wait_for
from tests.support.sse import BackgroundChat, is_error

KEY = "vram-admin-key"
TOTAL_MB = 1000
MODEL_MB = 100
ENGINES = [{"name": "g", "backend": "nvidia", "capabilities": ["fake"],
            "env": {"CUDA_VISIBLE_DEVICES": "GPU-a"}}]  # fmt: skip
MODELS: list[dict[str, Any]] = [
    {"id": f"m{i}", "format": "fake", "options": {"memory_mb": MODEL_MB}} for i in (1, 2, 3)
] + [
    {"id": "slow", "format": "fake",
     "options": {"memory_mb": MODEL_MB, "tokens_per_second": 20, "output_tokens": 10_000}},
]  # fmt: skip


class Card:
    """The readings file: one NVIDIA card whose used VRAM the test sets."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.set_free(1000)

    def set_free(self, free_mb: float) -> None:
        card = {"vendor": "nvidia", "temp": 40, "vram_total_mb": TOTAL_MB,
                "vram_used_mb": TOTAL_MB - free_mb}  # fmt: skip
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"cpu": {"temp": 40}, "gpus": {"GPU-a": card}}))
        tmp.replace(self.path)


@pytest.fixture
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Card]]:
    folder = tmp_path_factory.mktemp("vram")
    card = Card(folder / "sensors.json")
    config = {"engine_specs": ENGINES, "heartbeat_interval": 0.2}
    env = {"CODERAI_SENSORS_FILE": str(card.path)}
    with serving(folder / "server", config, MODELS, 1, KEY, env=env) as srv:
        yield srv, card


def loaded(srv: Server) -> list[str]:
    return sorted(srv.health()["engines"][0]["loaded_models"])


def chat(srv: Server, model: str) -> httpx.Response:
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60)


def test_a_load_short_of_vram_unloads_the_engines_least_recently_used_idle_model(
    rig: tuple[Server, Card],
) -> None:
    srv, card = rig
    card.set_free(250)
    assert chat(srv, "m1").status_code == 200
    card.set_free(150)  # m1 is on the card now
    assert chat(srv, "m2").status_code == 200  # 100 MiB of 150 free: nothing goes
    wait_for(lambda: loaded(srv) == ["m1", "m2"])
    card.set_free(50)
    assert chat(srv, "m3").status_code == 200  # 50 free: m1, used longest ago, goes
    wait_for(lambda: loaded(srv) == ["m2", "m3"])
    assert "model m3 needs 100 MiB of VRAM and 50 MiB are free" in srv.log()
    assert "unloading idle model m1 to make room" in srv.log()


def test_a_model_that_is_generating_stays_on_the_card(rig: tuple[Server, Card]) -> None:
    srv, card = rig
    card.set_free(1000)
    generating = BackgroundChat(srv.url, "slow")
    wait_for(lambda: len(generating.events) > 5)
    card.set_free(0)  # nothing free, and the only resident model is generating
    assert chat(srv, "m1").status_code == 200  # nothing idle to unload: the load tries
    wait_for(lambda: loaded(srv) == ["m1", "slow"])
    streamed = len(generating.events)
    wait_for(lambda: len(generating.events) > streamed + 5)  # the stream never stopped
    assert not any(is_error(e) for e in generating.events)
    generating.stop()
    assert "model m1 needs 100 MiB of VRAM and 0 MiB are free" in srv.log()
    assert "unloading idle model slow" not in srv.log()
