"""bench/gpu_check.py kept working between the rare times a GPU is lent: its dry run
(`python -m bench.gpu_check --dry-run`), with the tiny model alone and short streams, runs
every step that needs no CUDA call and writes its JSON and summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.server import REPO


def test_the_gpu_checks_dry_run_passes_every_step(tmp_path: Path) -> None:
    carried = tmp_path / "carried"
    (carried / "wheels").mkdir(parents=True)
    (carried / "wheels" / "none-0-py3-none-any.whl").write_bytes(b"")  # not installed here
    command = [sys.executable, "-m", "bench.gpu_check", "--dry-run", "--tiny-only",
               "--levels", "1,4", "--tokens", "4", "--carried", str(carried),
               "--out", str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "out/gpu_check.json").read_text())
    outcomes = {step["name"]: step["outcome"] for step in result["steps"]}
    assert outcomes == {name: "passed" for name in (
        "wheels", "environment", "nvml", "models", "server", "load", "stream-tiny",
        "readings", "unload", "gpu-tests")}, result["steps"]  # fmt: skip
    levels = {row["concurrency"]: row for row in result["levels"]}
    assert set(levels) == {1, 4}
    assert all(row["tokens"] == 4 * row["streams"] and not row["errors"] for row in levels.values())
    assert "tiny  x4" in (tmp_path / "out/gpu_check.txt").read_text()
