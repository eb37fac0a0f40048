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


#: every phase: the long run's (bench/api_fuzz.py). The CI test leaves out `coverage`
#: (each parameter's boundary and invalid values, in order: 40 s of its 50 here, whatever
#: the example count); its fuzzing phase generates invalid requests too (mode "all")
PHASES = "examples,coverage,fuzzing"


def st_command(url: str, examples: int, seed: int | None = None, phases: str = PHASES) -> list[str]:
    command = [
        str(ST), "run", url + "/admin/api/openapi.json",
        "--header", f"Authorization: Bearer {KEY}",
        "--max-examples", str(examples), "--workers", "1", "--request-timeout", "10",
        "--phases", phases,
        "--checks", "all", "--exclude-checks", "positive_data_acceptance",
        "--exclude-path", "/admin/api/events", "--exclude-path", "/admin/api/logs/stream",
        "--exclude-path-regex", "^/admin/api/(models|settings|engines/|pulls|scan)",
    ]  # fmt: skip
    return command if seed is None else [*command, "--seed", str(seed)]
