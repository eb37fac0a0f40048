"""The `coderai` command: a table of its commands, each module imported only when its
command runs. An engine process (`coderai engine`, each start and restart, each test's
server) loads neither the config's models nor the account store nor aiohttp, 0.15-0.2 s
each start would wait for; `coderai run` loads no model library."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from dataclasses import dataclass
from types import ModuleType

from coderai.errors import ConfigError


@dataclass(frozen=True)
class Command:
    #: imported when the command runs; it has `run(args) -> int` and the function below
    module: str
    help: str
    #: the module's function that adds the command's arguments to its parser
    arguments: str = "add_arguments"
    #: what follows `--` is not parsed but handed on as `args.rest` (argparse's
    #: subcommands do not pass `--` on)
    takes_rest: bool = False


COMMANDS = {
    "run": Command("coderai.cli.run", "start the server (front + supervised engines)"),
    "engine": Command("coderai.cli.engine", "one engine process (started by `coderai run`)"),
    "users": Command("coderai.cli.accounts", "console admin users", "add_user_arguments"),
    "keys": Command("coderai.cli.accounts", "API keys for /v1", "add_key_arguments"),
    "cluster": Command("coderai.cli.cluster", "keys of engines and nodes on other machines"),
    "launch": Command(
        "coderai.cli.launch", "start a coding agent against this server", takes_rest=True
    ),
    "models": Command("coderai.cli.models", "the models on this machine"),
}

DESCRIPTION = (
    "The `coderai` command: `run` starts the front and its engines; `engine` is one engine "
    "process, started by the front's supervisor rather than by hand."
)

#: the first spelling of `coderai engine`
ALIASES = {"--engine-only": "engine"}

LOG_LEVEL = "--log-level"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in ALIASES:
        argv[0] = ALIASES[argv[0]]
    name = named(argv)
    rest: list[str] = []
    if name in COMMANDS and COMMANDS[name].takes_rest and "--" in argv:
        at = argv.index("--")
        argv, rest = argv[:at], argv[at + 1 :]
    parser, module = _parser(name)
    args = parser.parse_args(argv)
    if module is None:  # not reached: an unknown command is argparse's error
        parser.error(f"no command {name!r}")
    args.rest = rest
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
    )
    try:
        return int(module.run(args))
    except ConfigError as exc:
        print(f"coderai: {exc.message}", file=sys.stderr)
        return 2


def named(argv: list[str]) -> str | None:
    """The command argv names: its first word that is neither an option nor the value of
    --log-level."""
    words = iter(argv)
    for word in words:
        if word == LOG_LEVEL:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _parser(name: str | None) -> tuple[argparse.ArgumentParser, ModuleType | None]:
    """Every command listed with its help; only the named one's module imported, to add
    its arguments."""
    parser = argparse.ArgumentParser(prog="coderai", description=DESCRIPTION)
    parser.add_argument(LOG_LEVEL, default=os.environ.get("CODERAI_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)
    module = None
    for command_name, command in COMMANDS.items():
        command_parser = sub.add_parser(command_name, help=command.help, description=command.help)
        if command_name != name:
            continue
        module = importlib.import_module(command.module)
        getattr(module, command.arguments)(command_parser)
        # after the command too (`coderai engine --log-level debug …`)
        command_parser.add_argument(LOG_LEVEL, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser, module
