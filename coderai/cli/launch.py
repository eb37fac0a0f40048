"""`coderai launch claude|codex|opencode|aider [--model ID] [--print] [-- ARGS…]`: a coding
agent started against a running CoderAI server with everything it needs (agents.py says
what), and told nothing that is not needed. The server is the one `coderai run` starts with
the same config (or `--url`); the model is `--model`, else the first the server lists; the
key is `--key`, else $CODERAI_API_KEY, else, where the server wants one, a key made for
the agent in the server's own state (as `coderai keys create` makes one). The model's
context is checked against what the agent needs, with the fix when it falls short.
`--print` shows the settings instead of starting the agent.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from coderai.cli import agents
from coderai.cli.config_file import config_file
from coderai.cli.local_server import request_json, server_url
from coderai.config import StateFiles, load_config
from coderai.errors import ConfigError

#: how long the server may take to answer: /tokenize loads the model if it must
_LOAD_SECONDS = 600


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "start a coding agent; what follows -- is the agent's own arguments"
    parser.add_argument("agent", choices=sorted(agents.AGENTS))
    parser.add_argument("--model", help="the model id (default: the first the server lists)")
    parser.add_argument("--url", help="the server (default: from the config, as `run` binds)")
    parser.add_argument("--key", help="an API key (default: $CODERAI_API_KEY, or one made)")
    parser.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")
    parser.add_argument("--print", action="store_true", help="show the settings; start nothing")


def _folder(files: StateFiles | None) -> Path:
    """Where the agents' files and made keys go: the server's state folder, or, without a
    config, a folder of the user's own (never the project the agent is started in)."""
    if files is not None:
        return (files.state_dir / "launch").resolve()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state, "coderai", "launch").resolve()


def _made_key(agent: str, files: StateFiles, folder: Path) -> str:
    """A key for the agent, in the server's own state (it sees a new key at once), kept
    (0600) so that the next launch reuses it."""
    from coderai.state import api_keys
    from coderai.state.database import Database

    record, token = api_keys.create(f"launch-{agent}")
    db = Database(files.state_dir)
    try:
        db.add_key(record)
    finally:
        db.close()
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / f"{agent}.key"
    kept.touch(mode=0o600)
    kept.write_text(token, encoding="utf-8")
    print(f"coderai: made API key {record.id} (launch-{agent}) for {agent}", file=sys.stderr)
    return token


def _error(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {exc.code}"


def _connect(
    args: argparse.Namespace, config: Any, files: StateFiles | None
) -> tuple[str, str, str, int]:
    """(url, key, model, context) of the server and model the agent is to use."""
    url = str(args.url).rstrip("/") if args.url else server_url(config)
    folder = _folder(files)
    key = args.key or os.environ.get("CODERAI_API_KEY", "")
    kept = folder / f"{args.agent}.key"
    if not key and not args.url and kept.is_file():
        key = kept.read_text(encoding="utf-8").strip()
    try:
        try:
            listed = request_json(f"{url}/v1/models", key)
        except urllib.error.HTTPError as exc:
            # a key is made only for the server this config runs, in its own state
            if exc.code != 401 or args.url or files is None:
                raise
            key = _made_key(args.agent, files, folder)
            listed = request_json(f"{url}/v1/models", key)
        models = [str(m["id"]) for m in listed.get("data", [])]
        model = args.model or (models[0] if models else "")
        if not model:
            raise ConfigError(f"the server at {url} serves no model")
        request_json(f"{url}/v1/models/{urllib.parse.quote(model, safe='')}", key)  # an alias too
        print(f"coderai: loading {model} if it is not loaded (up to 10 minutes)…", file=sys.stderr)
        try:
            sized = request_json(
                f"{url}/tokenize", key, {"model": model, "prompt": ""}, _LOAD_SECONDS
            )
            context = int(sized.get("max_model_len") or 0)
        except urllib.error.HTTPError as exc:  # a model that cannot tokenize: not told
            if exc.code == 404:
                raise
            print(f"coderai: warning: {model}'s context cannot be read ({_error(exc)})",
                  file=sys.stderr)  # fmt: skip
            context = 0
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise ConfigError(f"the server at {url} wants an API key: pass --key, or the "
                              "server's own --config") from None  # fmt: skip
        if exc.code == 404:
            raise ConfigError(f"the server at {url} has no model {args.model!r}") from None
        raise ConfigError(f"the server at {url} answered: {_error(exc)}") from None
    except ValueError:
        raise ConfigError(f"{url} is not a CoderAI server (its answer is not one)") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ConfigError(
            f"no CoderAI server at {url} ({exc}): start one with `coderai run`"
        ) from None
    return url, key, model, context


def run(args: argparse.Namespace) -> int:
    config_path = config_file(args.config)
    config = load_config(config_path)
    files = StateFiles.of(config, config_path.resolve()) if config_path is not None else None
    url, key, model, context = _connect(args, config, files)
    warning = agents.context_warning(args.agent, model, context) if context else None
    if warning:
        print(f"coderai: warning: {warning}", file=sys.stderr)
    plan = agents.plan(args.agent, url, key or "none", model, _folder(files), context)
    plan.args += args.rest  # after `--`: the agent's own
    for path, text in plan.files.items():  # --print's settings must work as printed
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    command = agents.AGENTS[args.agent]
    if args.print:
        print(plan.manual(command))
        return 0
    binary = shutil.which(command)
    if binary is None:
        raise ConfigError(f"{command} is not installed: {agents.INSTALL[args.agent]}")
    env = {k: v for k, v in os.environ.items() if k not in plan.unset}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(binary, [binary, *plan.args], {**env, **plan.env})
    return 0  # not reached: the agent is this process now
