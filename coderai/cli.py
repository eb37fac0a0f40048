"""The `coderai` command: `run` starts the front and its engines; `engine` is one engine
process, started by the front's supervisor rather than by hand."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from coderai import accounts_cli, cluster_cli, engine_main, launch_cli, models_cli
from coderai.catalogue.defaults import default_entries
from coderai.catalogue.entries import Catalogue, load_catalogue
from coderai.config import StateFiles, load_config
from coderai.engine_main import brief_openmp_spin
from coderai.errors import ConfigError

if TYPE_CHECKING:
    from coderai.front.engines.host import InProcess

log = logging.getLogger("coderai")

DEFAULT_CONFIG = Path("config.json")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="coderai", description=__doc__)
    parser.add_argument("--log-level", default=os.environ.get("CODERAI_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start the server (front + supervised engines)")
    run.add_argument("--config", type=Path, help="config.json (default: ./config.json if any)")
    run.add_argument("--host", help="bind address (overrides server.host)")
    run.add_argument("--port", type=int, help="port (overrides server.port)")
    run.add_argument(
        "--single-process",
        action="store_true",
        help="front and one engine in one process (no isolation; server.single_process)",
    )

    engine = sub.add_parser("engine", help="one engine process (started by `coderai run`)")
    engine_main.add_arguments(engine)
    # after `engine` too, as `python -m coderai engine` takes it (engine_main.main)
    engine.add_argument("--log-level", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    accounts_cli.add_parsers(sub)
    cluster_cli.add_parser(sub)
    launch_cli.add_parser(sub)
    models_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--engine-only"]:  # the seed's spelling of `coderai engine`
        argv[0] = "engine"
    argv, agent_args = launch_cli.split(argv)
    args = _parser().parse_args(argv)
    args.agent_args = agent_args
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
    )
    try:
        if args.command == "run":
            return _run(args)
        if args.command in ("users", "keys"):
            return accounts_cli.run(args, DEFAULT_CONFIG)
        if args.command == "cluster":
            return cluster_cli.run(args, DEFAULT_CONFIG)
        if args.command == "launch":
            return launch_cli.run(args, DEFAULT_CONFIG)
        if args.command == "models":
            return models_cli.run(args, DEFAULT_CONFIG)
        return engine_main.run(args)
    except ConfigError as exc:
        print(f"coderai: {exc.message}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    brief_openmp_spin()  # for engines in this process (single-process mode) and its children
    from coderai.front.server import serve

    config_path: Path | None = args.config
    if config_path is None and DEFAULT_CONFIG.is_file():
        config_path = DEFAULT_CONFIG
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
        from coderai.inprocess import in_process as engine_here
    return asyncio.run(serve(config, catalogue, files, engine_here))
