"""`coderai launch claude|codex|opencode|aider [--model ID] [--print] [-- ARGS…]`: a coding
agent started against a running CoderAI server with everything it needs (launch.py says
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
import urllib.request
from pathlib import Path
from typing import Any

from coderai import launch
from coderai.config import StateFiles, load_config
from coderai.errors import ConfigError

#: how long the server may take to answer: /tokenize loads the model if it must
_LOAD_SECONDS = 600


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "launch",
        help="start a coding agent against this server",
        description="what follows -- is the agent's own arguments",
    )
    parser.add_argument("agent", choices=sorted(launch.AGENTS))
    parser.add_argument("--model", help="the model id (default: the first the server lists)")
    parser.add_argument("--url", help="the server (default: from the config, as `run` binds)")
    parser.add_argument("--key", help="an API key (default: $CODERAI_API_KEY, or one made)")
    parser.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")
    parser.add_argument("--print", action="store_true", help="show the settings; start nothing")


def _request(url: str, key: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=_LOAD_SECONDS) as response:
        return json.loads(response.read())


def _server_url(args: argparse.Namespace, config: Any) -> str:
    if args.url:
        return str(args.url).rstrip("/")
    host = config.server.host
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.server.port}"


def _made_key(agent: str, files: StateFiles) -> str:
    """A key for the agent, in the server's own state (it sees a new key at once)."""
    from coderai.state import api_keys
    from coderai.state.database import Database

    record, token = api_keys.create(f"launch-{agent}")
    db = Database(files.state_dir)
    try:
        db.add_key(record)
    finally:
        db.close()
    print(f"coderai: made API key {record.id} (launch-{agent}) for {agent}", file=sys.stderr)
    return token


def _models(url: str, key: str) -> list[str]:
    listed = _request(f"{url}/v1/models", key)
    return [str(m["id"]) for m in listed.get("data", [])]


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """`coderai launch …` before `--`, and the agent's own arguments after it (argparse's
    subcommands do not pass `--` on)."""
    if argv[:1] == ["launch"] and "--" in argv:
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def run(args: argparse.Namespace, default_config: Path) -> int:
    config_path: Path | None = args.config
    if config_path is None and default_config.is_file():
        config_path = default_config
    config = load_config(config_path)
    url = _server_url(args, config)
    key = args.key or os.environ.get("CODERAI_API_KEY", "")
    try:
        try:
            models = _models(url, key)
        except urllib.error.HTTPError as exc:
            if exc.code != 401 or key:
                raise
            key = _made_key(args.agent, StateFiles.of(config, config_path))
            models = _models(url, key)
        model = args.model or (models[0] if models else "")
        if model not in models:
            raise ConfigError(f"the server at {url} has no model {model!r}: it has "
                              f"{', '.join(models) or 'none'}")  # fmt: skip
        sized = _request(f"{url}/tokenize", key, {"model": model, "prompt": ""})
    except urllib.error.HTTPError as exc:
        raise ConfigError(
            f"the server at {url} answered {exc.code}: {exc.read()[:300]!r}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ConfigError(
            f"no CoderAI server at {url} ({exc}): start one with `coderai run`"
        ) from None
    context = int(sized.get("max_model_len") or 0)
    warning = launch.context_warning(args.agent, model, context)
    if warning:
        print(f"coderai: warning: {warning}", file=sys.stderr)
    folder = StateFiles.of(config, config_path).state_dir / "launch"
    plan = launch.plan(args.agent, url, key or "none", model, folder, context)
    command = launch.AGENTS[args.agent]
    plan.args += args.agent_args
    if args.print:
        print(plan.manual(command))
        return 0
    binary = shutil.which(command)
    if binary is None:
        raise ConfigError(f"{command} is not installed: {launch.INSTALL[args.agent]}")
    for path, text in plan.files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(binary, [binary, *plan.args], {**os.environ, **plan.env})
    return 0  # not reached: the agent is this process now
