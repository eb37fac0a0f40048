"""`coderai models scan [--folder DIR]… [--add ID]… [--add-all]`: the models already on this
machine (model_scan.py says where it looks), each with the catalogue entry proposed for
it, and those the operator picks added, pointing at the files in place. A running server
(the config's, answering to its admin key) is told through its admin API, so the model is
served at once; otherwise the catalogue file is written (a new one keeps the embedded
default model beside the models added)."""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
from pathlib import Path
from typing import Any

from coderai import model_scan
from coderai.config import (
    Config,
    ModelEntry,
    StateFiles,
    load_catalogue,
    load_config,
    write_json_atomically,
)
from coderai.defaults import default_entries
from coderai.errors import ConfigError
from coderai.local_server import request_json, server_url


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    models = sub.add_parser("models", help="the models on this machine")
    models_sub = models.add_subparsers(dest="action", required=True)
    scan = models_sub.add_parser("scan", help="find models other tools keep; add some")
    scan.add_argument("--folder", type=Path, action="append", default=[],
                      help="also look here (repeatable)")  # fmt: skip
    scan.add_argument("--add", action="append", default=[], metavar="ID",
                      help="add this proposal to the catalogue (repeatable)")  # fmt: skip
    scan.add_argument("--add-all", action="store_true", help="add every new proposal")
    scan.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")


def _entries(path: Path) -> list[ModelEntry]:
    return load_catalogue(path).entries if path.is_file() else default_entries()


def _status(found: model_scan.Found, entries: list[ModelEntry]) -> str:
    real = os.path.realpath(found.path)
    for entry in entries:
        if entry.path and os.path.realpath(entry.path) == real:
            return f"in the catalogue as {entry.id}"
    if any(found.id in entry.names() for entry in entries):
        return "its id is taken"
    return "new"


def _admin(config: Config, entry: dict[str, Any]) -> bool:
    """Add through the running server's admin API; False when none answers."""
    key = config.auth.admin_key
    if not key:
        return False
    try:
        request_json(f"{server_url(config)}/admin/api/models", key, entry)
        return True
    except urllib.error.HTTPError as exc:
        raise ConfigError(f"the server refused {entry['id']}: {exc.read()[:300]!r}") from None
    except ValueError:
        raise ConfigError(f"{server_url(config)} is not a CoderAI server") from None
    except (urllib.error.URLError, OSError):
        return False


def run(args: argparse.Namespace, default_config: Path) -> int:
    config_path: Path | None = args.config
    if config_path is None and default_config.is_file():
        config_path = default_config
    config = load_config(config_path)
    files = StateFiles.of(config, config_path)
    entries = _entries(files.catalogue)
    found = model_scan.scan(model_scan.Places.default(tuple(args.folder)))
    rows = [(f, _status(f, entries)) for f in found]
    for f, status in rows:
        print(f"{f.id}\t{f.format}\t{f.source}\t{status}\t{f.path}")
    if not rows:
        print("coderai: no models found", file=sys.stderr)
    wanted = {f.id for f, status in rows if status == "new"} if args.add_all else set(args.add)
    by_id = {f.id: (f, status) for f, status in rows}
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise ConfigError(f"nothing found as {', '.join(sorted(missing))}")
    taken = [i for i in sorted(wanted) if by_id[i][1] != "new"]
    if taken:
        raise ConfigError(f"{', '.join(taken)}: {by_id[taken[0]][1]}")
    new = [
        {"id": i, "path": by_id[i][0].path, "format": by_id[i][0].format} for i in sorted(wanted)
    ]
    if not new:
        return 0
    if all(_admin(config, entry) for entry in new):
        print(f"coderai: added to the running server: {', '.join(e['id'] for e in new)}",
              file=sys.stderr)  # fmt: skip
        return 0
    added = [*entries, *(ModelEntry.model_validate(e) for e in new)]
    write_json_atomically(files.catalogue, [e.model_dump(exclude_defaults=True) for e in added])
    print(f"coderai: added to {files.catalogue}: {', '.join(e['id'] for e in new)} "
          "(a running server reads it when it starts)", file=sys.stderr)  # fmt: skip
    return 0
