"""The config file a command reads: its `--config`, else ./config.json where there is one
(as `coderai run` finds it), else none: the documented defaults."""

from __future__ import annotations

from pathlib import Path

DEFAULT = Path("config.json")


def config_file(given: Path | None) -> Path | None:
    if given is None and DEFAULT.is_file():
        return DEFAULT
    return given
