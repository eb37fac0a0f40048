"""JSON files read and written whole: a file that cannot be read is a ConfigError naming
it, and a write never leaves half a file (config.json, the catalogue, the cluster's
allow-list)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from coderai.errors import ConfigError


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None


def write_json_atomically(path: Path, data: Any) -> None:
    """temp file + fsync + rename (invariant 6): a reader sees the old file or the new one,
    never half of one, even if the process dies mid-write."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    # the new file keeps the old one's permissions: config.json may hold the admin key
    # and be readable by its owner alone
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, mode)
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a half-written temp file must not be left behind
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
