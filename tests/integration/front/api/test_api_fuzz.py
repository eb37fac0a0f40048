"""schemathesis against the OpenAPI description the front serves: generated requests (valid
and not) to every described route, each answer checked for no server error, a status,
content type, headers and body the description allows, and a 405 with its Allow header
for a method a route lacks.

Bounded for CI (examples per route, a fixed seed, so a run repeats exactly, and no
coverage phase: tests/support/fuzz.py says why); the long run, with the same command and
every phase, is bench/api_fuzz.py.

Left out, and why:
- the admin routes that change the fleet: models, settings and engine actions. A
  generated catalogue entry (a path of ".") or a setting (a RAM cap of a byte) makes later
  requests answer 503, correctly, which would read as a server error here. Their rules are
  tested in test_console_models.py and test_console_settings.py.
- pulls and the scan: a pull fetches from the hub (a 502 where it cannot be reached), and
  a scan of a generated folder ("/") would walk the whole disk. Tested in
  test_model_pull.py and catalogue/test_model_scan.py.
- the two endless streams: the console's live feed and the log stream.
- that every request the description allows is accepted: many rules are not expressible
  in it (a tool message needs its tool_call_id, a key cannot expire in the past, the last
  admin cannot be deleted).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fuzz import KEY, ROUTES, st_command
from tests.support.server import Server, serving


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    models = [{"id": "fake", "format": "fake", "options": {"output_tokens": 8}}]
    with serving(tmp_path_factory.mktemp("fuzz"), {"engines": 1}, models, 1, KEY) as srv:
        yield srv


@pytest.mark.timeout(300)
def test_generated_requests_get_described_answers_and_no_server_error(
    server: Server, tmp_path: Path
) -> None:
    command = st_command(server.url, examples=8, seed=1, phases="examples,fuzzing")
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=280)
    summary = run.stdout[run.stdout.find("=== SUMMARY") :]
    assert run.returncode == 0, run.stdout[-8000:]
    assert f"Tested: {ROUTES}" in summary, summary  # every route meant to be fuzzed was
    assert "passed" in summary and "failures" not in summary, summary
    log = server.log()
    at = log.find("Traceback")
    assert at < 0, log[max(0, at - 600) : at + 3000]
