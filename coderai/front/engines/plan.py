"""Which engine processes to run, from the config and the GPUs found: a pure function.

Precedence: server.engine_specs, else server.engine_gpus, else server.engines, else one
engine per NVIDIA GPU, and one CPU engine when there is none. Each engine is pinned to its
cards through its environment (CUDA_VISIBLE_DEVICES, so inside it the first card is always
cuda:0), told its backend (CODERAI_ENGINE_BACKEND) and its GPUs (CODERAI_ENGINE_GPUS).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coderai.config import Config, engine_slots
from coderai.front.engines.gpus import GpuInfo

#: what each backend's engines can run unless a spec says otherwise ("fake" is the
#: deterministic test backend, available everywhere)
DEFAULT_CAPABILITIES = {
    "nvidia": ["transformers", "gguf", "fake"],
    "vulkan": ["gguf", "fake"],
    "cpu": ["transformers", "gguf", "fake"],
}


@dataclass(frozen=True)
class EnginePlan:
    name: str
    backend: str
    capabilities: tuple[str, ...]
    slots: int
    gpus: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    def spawn_env(self) -> dict[str, str]:
        """Variables set for this engine's process on top of the front's environment."""
        return {
            **self.env,
            "CODERAI_ENGINE_BACKEND": self.backend,
            "CODERAI_ENGINE_GPUS": ",".join(self.gpus),
            "CODERAI_ENGINE_CAPABILITIES": ",".join(self.capabilities),
        }


def plan_engines(config: Config, gpus: list[GpuInfo]) -> list[EnginePlan]:
    server = config.server
    if server.engine_specs:
        return [
            _plan(
                config,
                spec.name,
                spec.backend,
                spec.env,
                spec.capabilities,
                _declared_gpus(spec.backend, spec.env),
            )
            for spec in server.engine_specs
        ]
    if server.engine_gpus:
        return [
            _nvidia(config, f"engine-{i}", str(gpu)) for i, gpu in enumerate(server.engine_gpus)
        ]
    if server.engines:
        if not gpus:
            return [_cpu(config, f"engine-{i}") for i in range(server.engines)]
        # more engines than cards share them round-robin
        return [
            _nvidia(config, f"engine-{i}", gpus[i % len(gpus)].uuid) for i in range(server.engines)
        ]
    if gpus:
        return [_nvidia(config, f"engine-{i}", gpu.uuid) for i, gpu in enumerate(gpus)]
    return [_cpu(config, "engine-0")]


def _plan(
    config: Config,
    name: str,
    backend: str,
    env: dict[str, str],
    capabilities: list[str] | None,
    gpus: tuple[str, ...],
) -> EnginePlan:
    caps = capabilities if capabilities is not None else DEFAULT_CAPABILITIES[backend]
    return EnginePlan(name, backend, tuple(caps), engine_slots(config, name), gpus, dict(env))


def _nvidia(config: Config, name: str, gpu: str) -> EnginePlan:
    env = {"CUDA_VISIBLE_DEVICES": gpu}
    if gpu.startswith("GPU-"):
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return _plan(config, name, "nvidia", env, None, (gpu,))


def _cpu(config: Config, name: str) -> EnginePlan:
    # hide any CUDA card: a CPU engine must not allocate on a GPU another engine owns
    return _plan(config, name, "cpu", {"CUDA_VISIBLE_DEVICES": ""}, None, ())


def _declared_gpus(backend: str, env: dict[str, str]) -> tuple[str, ...]:
    if backend == "nvidia":
        return tuple(g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g)
    if backend == "vulkan":
        devices = env.get("GGML_VK_VISIBLE_DEVICES", "")
        return tuple(f"vulkan:{d}" for d in devices.split(",") if d) or ("vulkan",)
    return ()
