"""schemathesis's command line against a server's OpenAPI description: one command for the
CI test (tests/integration/front/api/test_api_fuzz.py, whose docstring says what is left out and
why) and the long run (bench/api_fuzz.py)."""

from __future__ import annotations

import sys
from pathlib import Path

ST = Path(sys.executable).parent / "st"
#: the admin key the fuzzed server is given
KEY = "fuzz-admin-key-123"
#: the routes a run covers: all but those the test's docstring leaves out
ROUTES = 31


def st_command(url: str, examples: int, seed: int | None = None) -> list[str]:
    command = [
        str(ST), "run", url + "/admin/api/openapi.json",
        "--header", f"Authorization: Bearer {KEY}",
        "--max-examples", str(examples), "--workers", "1", "--request-timeout", "10",
        "--phases", "examples,coverage,fuzzing",
        "--checks", "all", "--exclude-checks", "positive_data_acceptance",
        "--exclude-path", "/admin/api/events", "--exclude-path", "/admin/api/logs/stream",
        "--exclude-path-regex", "^/admin/api/(models|settings|engines/|pulls|scan)",
    ]  # fmt: skip
    return command if seed is None else [*command, "--seed", str(seed)]
