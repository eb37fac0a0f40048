"""`coderai run` refuses a bad configuration with a clear message and exit code 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import psutil
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


def test_a_catalogue_named_in_the_config_that_is_not_there_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"models": {"catalogue": "typo.json"}}))
    done = subprocess.run(
        [sys.executable, "-m", "coderai", "run", "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "models.catalogue: there is no file" in done.stderr and "typo.json" in done.stderr


def test_an_address_that_cannot_be_bound_is_a_clear_error_and_leaves_no_engine(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"server": {"host": "not a host!!", "engines": 1}}))
    (tmp_path / "models.json").write_text(json.dumps([{"id": "a", "format": "fake"}]))
    done = subprocess.run(
        [sys.executable, "-m", "coderai", "run", "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "cannot listen on not a host!!" in done.stderr
    assert "Traceback" not in done.stderr
    started = [int(pid) for pid in re.findall(r"started engine \S+ \(pid (\d+)\)", done.stderr)]
    assert started and not any(psutil.pid_exists(pid) for pid in started)
