"""`coderai models`: the models of this machine's catalogue, from elsewhere.

- `pull USER/REPO[:QUANT|/FILE]`: fetched from the Hugging Face hub into its cache (pull/).
- `list`: each model with its context window, what it can do, and where it is loaded
  and how long it has been idle (models_list.py).
- `scan [--folder DIR]… [--add ID]… [--add-all]`: the models already on this machine
  (catalogue/model_scan.py says where it looks), each with the entry proposed for it, and those the
  operator picks added, pointing at the files in place.

A model is added through the running server's admin API (the config's server, answering to
its admin key), so it is served at once; otherwise into the catalogue file (a new one keeps
the embedded default model beside the models added)."""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coderai.catalogue import entry_estimate, model_scan
from coderai.catalogue.defaults import default_entries
from coderai.catalogue.entries import ModelEntry, load_catalogue
from coderai.cli import models_list
from coderai.cli.config_file import config_file
from coderai.cli.local_server import request_json, server_url
from coderai.common.json_files import write_json_atomically
from coderai.config import Config, StateFiles, load_config
from coderai.errors import ConfigError, ModelFileError
from coderai.pull.plan import DEFAULT_QUANT

if TYPE_CHECKING:
    from coderai.pull import download


def add_arguments(models: argparse.ArgumentParser) -> None:
    models_sub = models.add_subparsers(dest="action", required=True)
    listing = models_sub.add_parser("list", help="the catalogue's models, their facts and loads")
    listing.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")
    scan = models_sub.add_parser("scan", help="find models other tools keep; add some")
    scan.add_argument("--folder", type=Path, action="append", default=[],
                      help="also look here (repeatable)")  # fmt: skip
    scan.add_argument("--add", action="append", default=[], metavar="ID",
                      help="add this proposal to the catalogue (repeatable)")  # fmt: skip
    scan.add_argument("--add-all", action="store_true", help="add every new proposal")
    scan.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")
    pull = models_sub.add_parser("pull", help="fetch a model from the Hugging Face hub; add it")
    pull.add_argument("model", metavar="USER/REPO[:QUANT|/FILE]",
                      help=f"a GGUF repo (default quantisation {DEFAULT_QUANT}), one of its "
                           "files, or a transformers repo")  # fmt: skip
    pull.add_argument("--id", help="the catalogue id (default: USER/REPO:QUANT, or USER/REPO)")
    pull.add_argument("--endpoint", help="the hub's address (default: $HF_ENDPOINT, else the hub)")
    pull.add_argument("--mmproj", action="store_true",
                      help="also fetch its vision projector: the model reads images")  # fmt: skip
    pull.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")
    estimate = models_sub.add_parser("estimate", help="the memory a model takes loaded")
    estimate.add_argument("model", metavar="ID", help="a catalogue id or alias")
    estimate.add_argument("--room-mb", type=int,
                          help="the room to fit (default: its engine's, from the running "
                               "server, else this machine's available RAM)")  # fmt: skip
    estimate.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")


def _entries(path: Path) -> list[ModelEntry]:
    return load_catalogue(path).entries if path.is_file() else default_entries()


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


def run(args: argparse.Namespace) -> int:
    config_path = config_file(args.config)
    config = load_config(config_path)
    files = StateFiles.of(config, config_path)
    entries = _entries(files.catalogue)
    if args.action == "pull":
        return _pull(args, config, files.catalogue, entries)
    if args.action == "estimate":
        return _estimate(args, config, entries)
    if args.action == "list":
        listed = models_list.from_server(config)
        print("\n".join(models_list.rows(listed or models_list.from_files(entries))))
        return 0
    found = model_scan.scan(model_scan.Places.default(tuple(args.folder)))
    rows = [(f, model_scan.standing(f, entries)) for f in found]
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
    if new:
        _add(config, files.catalogue, entries, new)
    return 0


def _add(config: Config, catalogue: Path, entries: list[ModelEntry],
         new: list[dict[str, Any]]) -> None:  # fmt: skip
    """Through the running server if one answers to the admin key, else into the file."""
    if all(_admin(config, entry) for entry in new):
        print(f"coderai: added to the running server: {', '.join(e['id'] for e in new)}",
              file=sys.stderr)  # fmt: skip
        return
    added = [*entries, *(ModelEntry.model_validate(e) for e in new)]
    write_json_atomically(catalogue, [e.model_dump(exclude_defaults=True) for e in added])
    print(f"coderai: added to {catalogue}: {', '.join(e['id'] for e in new)} "
          "(a running server reads it when it starts)", file=sys.stderr)  # fmt: skip


def _from_server(config: Config, model_id: str) -> dict[str, Any] | None:
    """The running server's estimate (it knows its engines' VRAM); None if none answers."""
    key = config.auth.admin_key
    if not key:
        return None
    url = f"{server_url(config)}/admin/api/models/{urllib.parse.quote(model_id, safe='/')}"
    try:
        answer: dict[str, Any] = request_json(url + "/estimate", key)
        return answer
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # an entry the server has not read yet: this machine's
            return None
        raise ConfigError(f"the server refused: {exc.read()[:300]!r}") from None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _estimate(args: argparse.Namespace, config: Config, entries: list[ModelEntry]) -> int:
    entry = next((e for e in entries if args.model in e.names()), None)
    if entry is None:
        raise ConfigError(f"the catalogue has no model {args.model}")
    found = None if args.room_mb is not None else _from_server(config, entry.id)
    if found is None:
        host = entry_estimate.host_room()
        room = (args.room_mb << 20) if args.room_mb is not None else host
        where = "the room given" if args.room_mb is not None else "RAM"
        try:
            found = entry_estimate.estimate(entry, room, False, where, host).public()
        except ModelFileError as exc:
            raise ConfigError(exc.message) from None
    mib = entry_estimate.mib
    print(f"{entry.id}: {mib(found['total'])} at a context of {found['context']:,} tokens "
          f"(trained {found['trained']:,})")  # fmt: skip
    print(f"  weights {mib(found['weights'])}, KV cache {mib(found['kv'])}, "
          f"compute {mib(found['compute'])}")  # fmt: skip
    verdict = "fits" if found["fits"] else "does NOT fit"
    where = found["where"] + (f" of engine {found['engine']}" if found.get("engine") else "")
    print(f"  {verdict} in {where} ({mib(found['room'])} free); the largest context "
          f"that fits: {found['largest_context']:,} tokens")  # fmt: skip
    if found.get("loaded"):
        print("  (it is loaded there now: its memory is already taken from that room)")
    return 0 if found["fits"] else 1


class _Bar:
    """Progress on the terminal: one line redrawn where stderr is one, else a line a tenth."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.shown = -1

    def __call__(self, progress: download.Progress) -> None:
        share = progress.done * 100 // max(progress.total, 1)
        step = share if self.tty else share // 10 * 10
        if step == self.shown:
            return
        self.shown = step
        line = (f"{progress.file}: {progress.done / 1e6:.1f} of {progress.total / 1e6:.1f} MB "
                f"({share}%)")  # fmt: skip
        print(f"\r{line}" if self.tty else line, end="" if self.tty else "\n",
              file=sys.stderr, flush=True)  # fmt: skip


def _pull(args: argparse.Namespace, config: Config, catalogue: Path,
          entries: list[ModelEntry]) -> int:  # fmt: skip
    # here, not at the top: every `coderai` command (an engine's too) would pay the hub's
    # library's import
    from coderai.pull import download

    hub = download.Hub.from_env(args.endpoint)
    try:
        job, commit = download.resolve(hub, args.model)
        if args.mmproj:
            job = download.with_projector(job)
        model_id = args.id or job.id
        taken = next((e for e in entries if model_id in e.names()), None)
        if taken is not None:
            held = taken.path or taken.format
            raise ConfigError(f"the catalogue has {model_id} already ({held}); pass --id for "
                              "another name")  # fmt: skip
        listed = ", ".join(f.name for f in job.files)
        print(f"coderai: {job.repo}@{commit[:12]}: {listed} ({job.size / 1e6:.1f} MB) into "
              f"{hub.cache}", file=sys.stderr)  # fmt: skip
        if job.projector and not args.mmproj:
            print(f"coderai: {job.projector} (a vision projector) not fetched: pass --mmproj "
                  "for the model to read images", file=sys.stderr)  # fmt: skip
        bar = _Bar()
        path = download.fetch(hub, job, commit, download.Progress(bar))
        if bar.tty:
            print(file=sys.stderr)
    except download.PullError as exc:
        raise ConfigError(exc.message) from None
    print(path)
    projector = download.projector_path(hub, job, commit)
    _add(config, catalogue, entries,
         [{"id": model_id, **download.entry_fields(job, path, projector)}])  # fmt: skip
    return 0
