"""Which engines run, over a table of machines."""

from __future__ import annotations

from typing import Any

from coderai.config import Config
from coderai.front.engines.gpus import GpuInfo
from coderai.front.engines.plan import plan_engines

GIB = 1 << 30
TWO_NVIDIA = [
    GpuInfo(0, "GPU-aaa", "RTX 4090", 24 * GIB),
    GpuInfo(1, "GPU-bbb", "RTX 3090", 24 * GIB),
]


def config(**server: Any) -> Config:
    return Config.model_validate({"server": server})


def test_a_machine_without_gpus_gets_one_cpu_engine() -> None:
    (engine,) = plan_engines(config(), [])
    assert (engine.name, engine.backend, engine.gpus) == ("engine-0", "cpu", ())
    assert set(engine.capabilities) >= {"transformers", "gguf"}
    assert engine.spawn_env()["CUDA_VISIBLE_DEVICES"] == ""
    assert engine.spawn_env()["CODERAI_ENGINE_BACKEND"] == "cpu"


def test_two_nvidia_gpus_get_one_engine_each_pinned_by_uuid() -> None:
    engines = plan_engines(config(), TWO_NVIDIA)
    assert [(e.name, e.backend, e.gpus) for e in engines] == [
        ("engine-0", "nvidia", ("GPU-aaa",)),
        ("engine-1", "nvidia", ("GPU-bbb",)),
    ]
    env = engines[1].spawn_env()
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-bbb"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["CODERAI_ENGINE_GPUS"] == "GPU-bbb"


def test_engine_gpus_lists_the_cards_to_use() -> None:
    engines = plan_engines(config(engine_gpus=[1]), TWO_NVIDIA)
    assert [(e.name, e.gpus) for e in engines] == [("engine-0", ("1",))]
    assert engines[0].spawn_env()["CUDA_VISIBLE_DEVICES"] == "1"


def test_a_count_of_engines_without_gpus_runs_cpu_engines() -> None:
    engines = plan_engines(config(engines=3), [])
    assert [e.backend for e in engines] == ["cpu"] * 3


def test_nvidia_plus_radeon_through_engine_specs() -> None:
    specs = [
        {"name": "nvidia", "backend": "nvidia",
         "env": {"CUDA_VISIBLE_DEVICES": "0", "RADEON_VISIBLE_DEVICES": ""}},
        {"name": "radeon", "backend": "vulkan",
         "env": {"CUDA_VISIBLE_DEVICES": "", "GGML_VK_VISIBLE_DEVICES": "1"}},
    ]  # fmt: skip
    nvidia, radeon = plan_engines(config(engine_specs=specs), TWO_NVIDIA)
    assert (nvidia.capabilities, radeon.capabilities) == (
        ("transformers", "gguf", "fake"),
        ("gguf", "fake"),
    )
    assert radeon.gpus == ("vulkan:1",)
    # empty strings are values, not absences
    assert radeon.spawn_env()["CUDA_VISIBLE_DEVICES"] == ""
    assert nvidia.spawn_env()["RADEON_VISIBLE_DEVICES"] == ""


def test_one_engine_can_own_two_gpus() -> None:
    specs = [{"name": "dual", "backend": "nvidia",
              "env": {"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb"}}]  # fmt: skip
    (dual,) = plan_engines(config(engine_specs=specs), TWO_NVIDIA)
    assert dual.gpus == ("GPU-aaa", "GPU-bbb")


def test_declared_capabilities_replace_the_defaults() -> None:
    specs = [{"name": "small", "backend": "cpu", "capabilities": ["fake"]}]
    (small,) = plan_engines(config(engine_specs=specs), [])
    assert small.capabilities == ("fake",)
    assert small.spawn_env()["CODERAI_ENGINE_CAPABILITIES"] == "fake"


def test_slots_follow_overrides_by_name() -> None:
    specs = [{"name": "a", "backend": "cpu"}, {"name": "b", "backend": "cpu"}]
    cfg = config(engine_specs=specs, max_parallel_requests=4,
                 max_parallel_requests_overrides={"b": 9})  # fmt: skip
    assert [e.slots for e in plan_engines(cfg, [])] == [4, 9]
