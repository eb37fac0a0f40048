"""`coderai run`: the front and the engines it supervises, or with --single-process one
engine inside the front's process (inprocess.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from coderai.catalogue.defaults import default_entries
from coderai.catalogue.entries import Catalogue, load_catalogue
from coderai.cli.config_file import config_file
from coderai.cli.engine import brief_openmp_spin
from coderai.config import StateFiles, load_config
from coderai.errors import ConfigError

if TYPE_CHECKING:
    from coderai.front.engines.host import InProcess

log = logging.getLogger("coderai")


def add_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--config", type=Path, help="config.json (default: ./config.json if any)")
    run.add_argument("--host", help="bind address (overrides server.host)")
    run.add_argument("--port", type=int, help="port (overrides server.port)")
    run.add_argument(
        "--single-process",
        action="store_true",
        help="front and one engine in one process (no isolation; server.single_process)",
    )


def run(args: argparse.Namespace) -> int:
    brief_openmp_spin()  # for engines in this process (single-process mode) and its children
    from coderai.front.server import serve

    config_path = config_file(args.config)
    config = load_config(config_path)
    if args.host:
        config.server.host = args.host
    if args.port is not None:
        config.server.port = args.port
    if args.single_process:
        config.server.single_process = True
    files = StateFiles.of(config, config_path)
    path = files.catalogue
    if not path.is_file() and "catalogue" in config.models.model_fields_set:
        # named on purpose: a typo must not swap every model for the embedded default
        raise ConfigError(f"models.catalogue: there is no file {path}")
    if path.is_file():
        catalogue = load_catalogue(path)
    else:
        catalogue = Catalogue(default_entries())
        log.info(
            "no catalogue at %s; serving the embedded default: %s",
            path, ", ".join(e.id for e in catalogue.entries),
        )  # fmt: skip
    engine_here: InProcess | None = None
    if config.server.single_process:  # the engine runs here: the front never imports it
        from coderai.cli.inprocess import in_process as engine_here
    return asyncio.run(serve(config, catalogue, files, engine_here))
