"""The long schemathesis run: tests/integration/front/api/test_api_fuzz.py's command with many more
examples per route and a fresh seed each run (CI's run is short and repeats exactly).
It leaves out what that test leaves out, for the reasons its docstring gives.

    python -m bench.api_fuzz [--examples 100]

Writes bench/results/api_fuzz.json; exits 1 on a failure or a traceback in the server log.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.lib.results import RESULTS
from bench.lib.server import BenchServer
from tests.support.fuzz import KEY, st_command


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--out", type=Path, default=RESULTS / "api_fuzz.json")
    args = parser.parse_args()
    models = [{"id": "fake", "format": "fake", "options": {"output_tokens": 8}}]
    server = BenchServer({}, models, 1, extra={"auth": {"admin_key": KEY}})
    command = st_command(server.url, args.examples)
    start = time.monotonic()
    try:
        run = subprocess.run(command, cwd=server.dir, capture_output=True, text=True)
    finally:
        server.stop()
    at = run.stdout.find("=== SUMMARY")
    summary = run.stdout[at:] if at >= 0 else ""  # none: schemathesis itself failed
    seed = re.search(r"Seed: (\d+)", summary)
    tested = re.search(r"Tested: (\d+)", summary)
    cases = re.search(r"Test cases:\s*\n?\s*(\d+) generated", summary)
    traceback = "Traceback" in server.log()
    result = {
        "examples_per_route": args.examples,
        "seed": int(seed.group(1)) if seed else None,
        "routes": int(tested.group(1)) if tested else None,
        "cases": int(cases.group(1)) if cases else None,
        "seconds": time.monotonic() - start,
        "passed": run.returncode == 0 and bool(summary) and not traceback,
        "traceback_in_log": traceback,
        "summary": summary[-3000:],
    }
    args.out.write_text(json.dumps(result, indent=1))
    print(summary[-3000:] or run.stdout[-3000:] + run.stderr[-3000:])
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
