"""The `coderai` command: `run` starts the front and its engines; `engine` is one engine
process, started by the front's supervisor rather than by hand."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from coderai import accounts_cli, cluster_cli, launch_cli, models_cli
from coderai.config import Catalogue, StateFiles, load_catalogue, load_config
from coderai.defaults import default_entries
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
    engine.add_argument("--name", required=True)
    engine.add_argument("--connect", required=True, help="the front's bus endpoint")
    engine.add_argument("--slots", type=int, default=8)
    engine.add_argument("--epoch", type=int, default=None)
    engine.add_argument(
        "--server-key", type=Path, help="the front's public key file (a tcp:// bus uses CURVE)"
    )
    engine.add_argument("--key", type=Path, help="this engine's secret key file (tcp://)")
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
        return _engine(args)
    except ConfigError as exc:
        print(f"coderai: {exc.message}", file=sys.stderr)
        return 2


#: OpenMP's spin before a waiting thread sleeps (libgomp's GOMP_SPINCOUNT, iterations).
#: ggml ends each graph node with an OpenMP barrier, hundreds a token: a thread that sleeps
#: at each (a passive wait) is woken hundreds of times a token, and SmolLM2 decoded at
#: 63-68 tok/s through `coderai run` on 2 cores against 86-101 with this spin (measured,
#: 1 stream; 108 against 133 at 4). libgomp's default spin (300,000) is long enough to
#: keep spinning between steps while the front and clients want the same cores.
OPENMP_SPIN = "10000"


def brief_openmp_spin() -> None:
    """llama.cpp's (and torch's) OpenMP threads spin for a short while at a barrier, then
    sleep. libgomp's own default spin (300,000 turns) kept them spinning from one step to
    the next while the front and clients wanted the same cores: a 117-token SmolLM2 answer
    took 6-58 s instead of 1.3 s on 2 cores (measured). Never spinning makes every barrier
    inside a step a sleep and a wake (see OPENMP_SPIN). Set before llama.cpp or torch load
    their OpenMP runtime. An operator's own setting of either variable wins; an empty one is
    none (libgomp reads it as unset)."""
    if not any(os.environ.get(name, "").strip() for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")):
        os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN


def _engine(args: argparse.Namespace) -> int:
    # models are local files: a hub lookup would only stall (~46 s) and then fail
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    brief_openmp_spin()
    from coderai.engine.worker import EngineSettings, EngineWorker

    front_pid = os.environ.get("CODERAI_FRONT_PID")
    curve_keys = None
    if args.connect.startswith("tcp://"):
        if args.server_key is None or args.key is None:
            raise ConfigError("a tcp:// bus needs --server-key and --key (coderai cluster keygen)")
        from coderai.bus.curve import load_pair, load_public

        curve_keys = (load_public(args.server_key), *load_pair(args.key))
    capabilities = os.environ.get("CODERAI_ENGINE_CAPABILITIES", "")
    settings = EngineSettings(
        name=args.name,
        connect=args.connect,
        slots=args.slots,
        token=os.environ.get("CODERAI_BUS_TOKEN", ""),
        epoch=args.epoch if args.epoch is not None else int(time.time() * 1000),
        backend=os.environ.get("CODERAI_ENGINE_BACKEND", "cpu"),
        capabilities=[c for c in capabilities.split(",") if c],
        front_pid=int(front_pid) if front_pid else None,
        gpus=[g for g in os.environ.get("CODERAI_ENGINE_GPUS", "").split(",") if g],
        curve=curve_keys,
    )
    return asyncio.run(EngineWorker(settings).run())


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
