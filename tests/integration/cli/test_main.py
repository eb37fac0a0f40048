"""The `coderai` command's table of commands: every command is listed and answers --help,
and a command imports its own module alone, so an engine process starts without the
config's models, the account store or aiohttp, and `coderai run` without a model library."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from coderai.cli.main import COMMANDS

#: the command's argv through main, then (after `--then`) what it imports when it runs;
#: prints the modules loaded
_LOADED = """
import importlib, json, sys
from coderai.cli.main import main
argv = sys.argv[1:]
then = argv[argv.index("--then") + 1:] if "--then" in argv else []
try:
    main(argv[:len(argv) - len(then) - (1 if then else 0)] + ["--help"])
except SystemExit:
    pass
for name in then:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""

MODEL_LIBRARIES = ("torch", "transformers", "accelerate", "llama_cpp")


def loaded(*argv: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _LOADED, *argv], capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def command_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if m in {c.module for c in COMMANDS.values()}}


def test_help_lists_every_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "coderai", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name, command in COMMANDS.items():
        assert name in out and command.help in out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_answers_help_having_imported_its_module_alone(name: str) -> None:
    modules = loaded(name)
    assert command_modules(modules) - {"coderai.cli.engine"} <= {COMMANDS[name].module}
    assert not [m for m in modules if m.split(".")[0] in MODEL_LIBRARIES]


def test_an_engine_process_loads_no_config_accounts_or_http_server() -> None:
    modules = loaded("engine", "--then", "coderai.engine.worker")
    assert command_modules(modules) == {"coderai.cli.engine"}
    heavy = ("aiohttp", "pydantic", "coderai.config", "coderai.state", "coderai.front")
    assert not [m for m in modules if m.startswith(heavy)]
