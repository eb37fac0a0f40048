"""The long API fuzz run for bench/REPORT.md (from bench/api_fuzz.py)."""

from __future__ import annotations

from typing import Any


def api_fuzz_section(result: dict[str, Any]) -> list[str]:
    verdict = "every one passed" if result["passed"] else "**some failed**"
    cases = "?" if result["cases"] is None else f"{result['cases']:,}"
    return [
        "## API fuzzing, the long run",
        "",
        f"`python -m bench.api_fuzz --examples {result['examples_per_route']}`: schemathesis"
        f" against the OpenAPI description the front serves, {result['routes']} routes (the"
        " ones tests/integration/front/api/test_api_fuzz.py fuzzes in CI with 8 examples each"
        " and a fixed"
        f" seed), seed {result['seed']}: {cases} generated requests in"
        f" {result['seconds']:.0f} s, {verdict}; every check but positive_data_acceptance (no"
        " 5xx, status, content type, headers and body as described, the error envelope), and"
        f" no traceback in the server's log: {not result['traceback_in_log']}.",
        "",
    ]
