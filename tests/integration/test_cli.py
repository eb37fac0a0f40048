"""`coderai run` refuses a bad configuration with a clear message and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def run(
    tmp_path: Path, config: object, models: object | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if models is not None:
        (tmp_path / "models.json").write_text(json.dumps(models))
    return subprocess.run(
        [sys.executable, "-m", "coderai", "run", "--config", str(tmp_path / "config.json")],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("config", "models", "says"),
    [
        ("{not json", None, "not valid JSON"),
        ({"server": {"port": "eighty"}}, None, "server.port"),
        ({"server": {"max_queue": -1}}, None, "server.max_queue"),
        ({"server": {"engine_specs": [{"name": "a", "backend": "tpu"}]}}, None, "backend"),
        ({}, [{"id": "a", "format": "fake"}, {"id": "a", "format": "fake"}], "used by two"),
        ({}, [{"id": "x"}], "needs a path or an explicit format"),
        ({"sever": {"port": 8000}}, None, "sever: unknown key"),
        ({"server": {"prot": 8000}}, None, "server.prot: unknown key"),
    ],
)
def test_a_bad_configuration_is_refused_with_a_clear_message(
    tmp_path: Path, config: object, models: object, says: str
) -> None:
    result = run(tmp_path, config, models)
    assert result.returncode == 2
    assert says in result.stderr
