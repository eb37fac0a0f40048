"""`coderai cluster …`: the keys of engines and nodes that join the bus from other
machines over TCP (cluster.bind). A running front reads the allow-list again when it
changes: a new key may join at once, and a revoked key's engine is cut off."""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path

from coderai.bus import curve
from coderai.cli.config_file import config_file
from coderai.config import StateFiles, load_config
from coderai.errors import ConfigError


def add_arguments(cluster: argparse.ArgumentParser) -> None:
    actions = cluster.add_subparsers(dest="action", required=True)
    keygen = actions.add_parser(
        "keygen",
        help="print the front's public key (made on first use); with --out, make a key "
        "pair for a remote engine or node instead",
    )
    keygen.add_argument("--out", type=Path, help="write NAME.key and NAME.key_secret here")
    allow = actions.add_parser("allow", help="let a public key join the bus")
    allow.add_argument("key", help="the public key (40 characters, Z85) or its .key file")
    allow.add_argument("--name", help="what to call it (default: the key's first 8 characters)")
    actions.add_parser("list", help="list the allowed keys")
    revoke = actions.add_parser("revoke", help="remove a key: its engine is cut off")
    revoke.add_argument("key", help="the public key or its name")
    for parser in actions.choices.values():
        parser.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")


def run(args: argparse.Namespace) -> int:
    if args.action == "keygen" and args.out is not None:
        if args.config is not None:  # never taken and ignored
            raise ConfigError("keygen --out makes a key pair of its own; it reads no --config")
        return _client_pair(args.out)
    config_path = config_file(args.config)
    state_dir = StateFiles.of(load_config(config_path), config_path).state_dir
    if args.action == "keygen":
        public, _ = curve.server_pair(state_dir)
        print(public.decode())
        print(f"(in {curve.cluster_dir(state_dir) / 'server.key'}: give this file to remote "
              "engines as --server-key)")  # fmt: skip
        return 0
    allowed = curve.AllowList(state_dir)
    if args.action == "allow":
        key = _key_of(args.key)
        entry = allowed.allow(key, args.name or key[:8])
        print(f"allowed {entry.name}: {entry.key}")
    elif args.action == "list":
        for entry in allowed.read().values():
            added = datetime.datetime.fromtimestamp(entry.added).isoformat(timespec="seconds")
            print(f"{entry.name}\t{entry.key}\tadded {added}")
    else:
        entry = allowed.revoke(args.key)
        print(f"revoked {entry.name}: {entry.key}")
    return 0


def _client_pair(out: Path) -> int:
    folder, name = out.parent, out.name
    if (folder / f"{name}.key_secret").exists():
        raise ConfigError(f"{folder / name}.key_secret exists; not overwriting a key")
    folder.mkdir(parents=True, exist_ok=True)
    old = os.umask(0o077)  # the secret is never readable by others, not for a moment
    try:
        public_file, secret_file = curve.create_pair(folder, name)
    finally:
        os.umask(old)
    os.chmod(public_file, 0o644)
    print(curve.load_public(public_file).decode())
    print(f"(public: {public_file}; secret: {secret_file}, for --key)")
    return 0


def _key_of(text: str) -> str:
    path = Path(text)
    if len(text) != 40 and path.is_file():
        return curve.load_public(path).decode()
    return curve.check_key(text)
