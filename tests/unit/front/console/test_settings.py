"""Settings by dotted name: which exist, which apply live, and what a change makes of the
config (pure functions; the routes are tested in
tests/integration/front/console/test_console_settings)."""

from __future__ import annotations

from typing import Any

import pytest

from coderai.config import Config, MediaConfig, SearchConfig, engine_settings
from coderai.errors import InvalidRequest
from coderai.front.console import settings
from coderai.front.engines.plan import EnginePlan

ENGINES = ["alpha", "beta"]


def config(**sections: Any) -> Config:
    return Config.model_validate(sections)


def refusal(changes: dict[str, object], base: Config | None = None) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        settings.patch(base or config(), changes, ENGINES)
    return caught.value


def test_every_field_of_every_section_is_a_setting_but_the_secrets() -> None:
    expected = {
        f"{section}.{field}"
        for section in (
            "server",
            "models",
            "auth",
            "thermal",
            "offload",
            "cluster",
            "broker",
            "search",
            "media",
        )
        for field in type(getattr(Config(), section)).model_fields
    } - {"auth.admin_key", "broker.registration_token"}
    assert set(settings.NAMES) == expected
    assert set(settings.SECTIONS) == set(Config.model_fields)


def test_values_are_json_by_dotted_name_and_never_show_the_admin_key() -> None:
    values = settings.values(config(auth={"admin_key": "s3cret-key"}, server={"max_queue": 5}))
    assert values["server.max_queue"] == 5
    assert values["server.engine_specs"] is None
    assert "auth.admin_key" not in values
    assert "s3cret-key" not in str(values)


def test_live_and_restart_settings_split_every_name() -> None:
    assert set(settings.LIVE_NAMES) == {
        "server.default_engine",
        "server.routing",
        "server.routing_load_bound",
        "server.max_parallel_requests",
        "server.max_parallel_requests_overrides",
        "server.max_queue",
        "server.queue_timeout",
        "server.stream_keepalive_seconds",
        "models.max_model_instances",
        "models.max_model_instances_overrides",
        "models.memory_budget_mb",
        "models.keep_alive",
        "thermal.cpu_high",
        "thermal.cpu_resume",
        "thermal.gpu_high",
        "thermal.gpu_resume",
        "thermal.gpu_overrides",
        "offload.max_ram_gb",
        *(f"search.{name}" for name in SearchConfig.model_fields),
        *(f"media.{name}" for name in MediaConfig.model_fields),
    }
    assert set(settings.RESTART_NAMES) == set(settings.NAMES) - set(settings.LIVE_NAMES)


def test_a_patch_returns_the_new_config_and_what_changed_live_and_at_restart() -> None:
    patched = settings.patch(
        config(),
        {"server.max_queue": 3, "server.port": 9001, "models.max_model_instances": 1},
        ENGINES,
    )
    assert patched.config.server.max_queue == 3
    assert patched.config.server.port == 9001
    # max_model_instances was already 1: nothing changed there
    assert (patched.live, patched.restart) == (["server.max_queue"], ["server.port"])


def test_an_unknown_setting_is_refused_by_name() -> None:
    error = refusal({"server.max_queue": 3, "server.max_qeue": 3})
    assert error.param == "server.max_qeue"
    assert "server.max_qeue" in error.message
    assert refusal({"server": {"max_queue": 3}}).param == "server"


def test_the_admin_key_cannot_be_set() -> None:
    error = refusal({"auth.admin_key": "a-new-key-123"})
    assert error.param == "auth.admin_key"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("server.max_queue", -1),
        ("server.max_queue", "5"),  # a body is JSON: a number is sent as one
        ("server.queue_timeout", 0),
        ("server.max_parallel_requests", 0),
        ("server.max_parallel_requests_overrides", {"alpha": 0}),
        ("models.max_model_instances_overrides", {"alpha": "2"}),
        ("server.engine_specs", [{"name": "x", "backend": "amiga"}]),
        ("server.engine_specs", [{"name": "x", "backend": "cpu"}] * 2),
    ],
)
def test_a_value_pydantic_refuses_is_refused_naming_the_setting(name: str, value: Any) -> None:
    error = refusal({name: value})
    assert error.param == name
    assert error.message.startswith(name)


def test_the_default_engine_must_be_a_planned_engine_or_none() -> None:
    error = refusal({"server.default_engine": "gamma"})
    assert error.param == "server.default_engine"
    assert "alpha, beta" in error.message
    patched = settings.patch(config(), {"server.default_engine": "beta"}, ENGINES)
    assert patched.live == ["server.default_engine"]
    unset = settings.patch(patched.config, {"server.default_engine": None}, ENGINES)
    assert unset.config.server.default_engine is None


def test_a_default_engine_no_longer_planned_does_not_block_other_changes() -> None:
    stale = config(server={"default_engine": "gone"})
    patched = settings.patch(stale, {"server.max_queue": 1}, ENGINES)
    assert patched.live == ["server.max_queue"]


def test_adopting_takes_only_the_named_settings() -> None:
    in_force = config()
    saved = settings.patch(in_force, {"server.max_queue": 2, "server.port": 1}, ENGINES)
    adopted = settings.adopt(in_force, saved.config, saved.live)
    assert (adopted.server.max_queue, adopted.server.port) == (2, 8000)


def test_the_file_keeps_what_its_author_wrote_plus_the_changes() -> None:
    written = {"server": {"port": 8123, "engines": 2}, "auth": {"admin_key": "k" * 8}}
    changed = settings.patch(Config.model_validate(written), {"server.max_queue": 4,
                             "models.memory_budget_mb": 512}, ENGINES)  # fmt: skip
    data = settings.file_data(written, changed.config, changed.live)
    assert data == {
        "server": {"port": 8123, "engines": 2, "max_queue": 4},
        "auth": {"admin_key": "k" * 8},
        "models": {"memory_budget_mb": 512},
    }
    assert written["server"] == {"port": 8123, "engines": 2}  # the input is left alone
    assert Config.model_validate(data).server.max_queue == 4


def test_engine_settings_carry_each_engines_slots() -> None:
    cfg = config(server={"max_parallel_requests": 4,
                         "max_parallel_requests_overrides": {"beta": 2}})  # fmt: skip
    assert engine_settings(cfg, "alpha")["slots"] == 4
    assert engine_settings(cfg, "beta")["slots"] == 2


def plan(name: str, backend: str, env: dict[str, str] | None = None) -> EnginePlan:
    return EnginePlan(name, backend, ("gguf",), 8, (), env or {})


def test_gpu_vendors_come_from_the_engine_plans() -> None:
    assert settings.gpu_vendors([plan("engine-0", "cpu")]) == []
    plans = [
        plan("nvidia", "nvidia"),
        plan("radeon", "vulkan", {"GGML_VK_VISIBLE_DEVICES": "1"}),
        plan("arc", "vulkan", {"VK_ICD_FILENAMES": "/usr/share/vulkan/icd.d/intel_icd.json"}),
        plan("nvidia-2", "nvidia"),
    ]
    assert settings.gpu_vendors(plans) == ["nvidia", "amd", "intel"]
