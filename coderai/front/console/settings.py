"""The settings an operator changes from the console, by dotted name ("server.max_queue"):
which exist, which apply live and which at restart, and what a change makes of the
config. Pure functions over Config; the routes (settings_api.py) do the I/O and the
applying."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from coderai.common.validation import first_problem
from coderai.config import (
    AuthConfig,
    BrokerConfig,
    ClusterConfig,
    Config,
    MediaConfig,
    ModelsConfig,
    OffloadConfig,
    SearchConfig,
    ServerConfig,
    ThermalConfig,
)
from coderai.errors import InvalidRequest
from coderai.front.engines.plan import EnginePlan

#: the sections of Config the console shows, in the order it shows them
SECTIONS: dict[str, type[BaseModel]] = {
    "server": ServerConfig,
    "models": ModelsConfig,
    "auth": AuthConfig,
    "thermal": ThermalConfig,
    "offload": OffloadConfig,
    "cluster": ClusterConfig,
    "broker": BrokerConfig,
    "search": SearchConfig,
    "media": MediaConfig,
}
#: never shown nor changed here: the key that guards this very API, and the broker's
SECRETS = frozenset({"auth.admin_key", "broker.registration_token"})
NAMES = tuple(
    f"{section}.{field}"
    for section, model in SECTIONS.items()
    for field in model.model_fields
    if f"{section}.{field}" not in SECRETS
)
#: settings the engines apply (they reach each one in a CONTROL config)
ENGINE_SETTINGS = frozenset(
    {
        "server.max_parallel_requests",
        "server.max_parallel_requests_overrides",
        "models.max_model_instances",
        "models.max_model_instances_overrides",
        "models.memory_budget_mb",
        *(f"thermal.{name}" for name in ThermalConfig.model_fields),
        "offload.max_ram_gb",
    }
)
#: settings the running front and engines take at once; the rest wait for a restart
LIVE = ENGINE_SETTINGS | {
    "server.default_engine",
    "server.routing",
    "server.routing_load_bound",
    "models.keep_alive",
    "server.max_queue",
    "server.queue_timeout",
    "server.stream_keepalive_seconds",
    # read by each request that runs a server tool (anthropic/routes.py)
    *(f"search.{name}" for name in SearchConfig.model_fields),
    *(f"media.{name}" for name in MediaConfig.model_fields),
}
#: settings kept per engine name
OVERRIDES = frozenset(
    {"server.max_parallel_requests_overrides", "models.max_model_instances_overrides"}
)
LIVE_NAMES = [n for n in NAMES if n in LIVE]
RESTART_NAMES = [n for n in NAMES if n not in LIVE]

#: what a Vulkan engine's ICD file name says about the maker of its card
_ICD_VENDORS = (("radeon", "amd"), ("amd", "amd"), ("intel", "intel"), ("nvidia", "nvidia"))


@dataclass(frozen=True)
class Patched:
    """A patch applied: the config with every change, and the names whose value changed."""

    config: Config
    live: list[str]
    restart: list[str]


def values(config: Config) -> dict[str, Any]:
    """Every setting by dotted name, as JSON values; secrets left out."""
    dumped = config.model_dump(mode="json")
    return {name: _get(dumped, name) for name in NAMES}


def patch(config: Config, changes: Mapping[str, object], engines: Collection[str]) -> Patched:
    """`config` with `changes` ({dotted name: value}) applied and validated; `engines` are
    the planned engines, the only ones server.default_engine may name. Raises
    InvalidRequest naming the first setting that is unknown, secret or refused."""
    data = config.model_dump()
    new = config
    for name, value in changes.items():
        if name in SECRETS:
            raise InvalidRequest(f"{name} cannot be changed here", param=name)
        if name not in NAMES:
            raise InvalidRequest(f"{name}: unknown setting (check its spelling)", param=name)
        section, field = name.split(".")
        data[section][field] = value
        # one at a time, so that a refusal is the doing of this setting
        try:
            new = Config.model_validate(data, strict=True)
        except ValidationError as exc:
            where, message = first_problem(exc)
            raise InvalidRequest(f"{'.'.join(where) or name}: {message}", param=name) from None
    for name in OVERRIDES.intersection(changes):
        section, field = name.split(".")
        unknown = sorted(set(getattr(getattr(new, section), field)) - set(engines))
        if unknown:
            raise InvalidRequest(
                f"{name}: no engine is named {unknown[0]!r} (engines: {', '.join(engines)})",
                param=name,
            )
    default = new.server.default_engine
    if "server.default_engine" in changes and default is not None and default not in engines:
        raise InvalidRequest(
            f"server.default_engine: no engine is named {default!r}"
            f" (engines: {', '.join(engines) or 'none'})",
            param="server.default_engine",
        )
    before, after = values(config), values(new)
    changed = [n for n in NAMES if before[n] != after[n]]
    return Patched(new, [n for n in changed if n in LIVE], [n for n in changed if n not in LIVE])


def adopt(config: Config, source: Config, names: Iterable[str]) -> Config:
    """`config` with the named settings taken from `source`: the settings in force, given
    the live part of a change while the rest waits for a restart."""
    data, taken = config.model_dump(), source.model_dump()
    for name in names:
        section, field = name.split(".")
        data[section][field] = taken[section][field]
    return Config.model_validate(data)


def file_data(data: Mapping[str, Any], config: Config, names: Iterable[str]) -> dict[str, Any]:
    """config.json's content with the named settings set to their values in `config`:
    the file stays as its author wrote it (no defaults spelled out), plus the changes."""
    out = dict(data)
    current = values(config)
    for name in names:
        section, field = name.split(".")
        out[section] = {**out.get(section, {}), field: current[name]}
    return out


def gpu_vendors(plans: Iterable[EnginePlan]) -> list[str]:
    """The makers of the engines' GPUs, for settings kept per vendor. A Vulkan engine's
    card is the one its ICD file names, else a Radeon: Vulkan is how this server runs
    AMD cards, which CUDA cannot."""
    vendors: list[str] = []
    for plan in plans:
        if plan.backend == "nvidia":
            vendor = "nvidia"
        elif plan.backend == "vulkan":
            icd = plan.env.get("VK_ICD_FILENAMES", "").lower()
            vendor = next((v for hint, v in _ICD_VENDORS if hint in icd), "amd")
        else:
            continue
        if vendor not in vendors:
            vendors.append(vendor)
    return vendors


def _get(dumped: Mapping[str, Any], name: str) -> Any:
    section, field = name.split(".")
    return dumped[section][field]
