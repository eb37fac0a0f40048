"""Where benchmark scripts keep their results: JSON under bench/results/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


def save(result: dict[str, Any], out: Path) -> None:
    """Write a run's result and print it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
