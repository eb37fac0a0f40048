"""How a settings change is written to config.json (settings_api._rewrite): the file stays
as its author wrote it plus the changed settings, and a file that would not load is left
alone (the route is tested in tests/integration/front/console/test_console_settings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coderai.config import Config
from coderai.errors import ConfigError
from coderai.front.console.settings_api import _rewrite


def saved(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_only_the_named_settings_are_added_to_what_the_author_wrote(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    written = {"server": {"port": 9000}, "auth": {"admin_key": "s3cret-admin-key"}}
    path.write_text(json.dumps(written), encoding="utf-8")
    config = Config.model_validate(
        {"server": {"port": 9100, "max_queue": 7}, "auth": {"admin_key": "s3cret-admin-key"}}
    )
    _rewrite(path, config, ["server.max_queue"])
    # the port changed in `config` but was not named: the file keeps the author's; no
    # default is spelled out; the other sections stay as they were
    assert saved(path) == {
        "server": {"port": 9000, "max_queue": 7},
        "auth": {"admin_key": "s3cret-admin-key"},
    }


def test_a_named_setting_the_file_has_takes_its_new_value(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"server": {"port": 9000, "max_queue": 3}}), encoding="utf-8")
    config = Config.model_validate({"server": {"port": 9100, "max_queue": 3}})
    _rewrite(path, config, ["server.port", "models.max_model_instances"])
    assert saved(path) == {
        "server": {"port": 9100, "max_queue": 3},
        "models": {"max_model_instances": config.models.max_model_instances},
    }


def test_a_missing_file_is_created_with_the_named_settings_alone(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    config = Config.model_validate({"server": {"max_queue": 5, "port": 9100}})
    _rewrite(path, config, ["server.max_queue"])
    assert saved(path) == {"server": {"max_queue": 5}}
    Config.model_validate(saved(path))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"server": {"port": 9000', "cannot be updated, fix it first: "),
        ('{"server": {"max_queu": 3}}', "server.max_queu: unknown key (check its spelling)"),
        ('{"server": {"port": -1}}', "server.port: "),
        ("[]", "(top level): "),
    ],
)
def test_a_file_that_would_not_load_is_not_built_upon(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        _rewrite(path, Config.model_validate({"server": {"max_queue": 5}}), ["server.max_queue"])
    assert str(path) in refused.value.message
    assert problem in refused.value.message
    assert path.read_text(encoding="utf-8") == content
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]  # no temp file left
