"""`coderai users …` and `coderai keys …`: the console's accounts from a shell, for the
first admin (there is no default password) and for scripts. They write the same database
as a running front (SQLite allows it); a running front sees a new key at once and a
revoked one within auth.KEY_CACHE_SECONDS."""

from __future__ import annotations

import argparse
import datetime
import getpass
import json
import sys
import time
from pathlib import Path
from typing import Any

from coderai.cli.config_file import config_file
from coderai.config import StateFiles, load_config
from coderai.state import api_keys
from coderai.state.database import Database, LastUser
from coderai.state.passwords import hash_password

MIN_PASSWORD = 8


def add_user_arguments(users: argparse.ArgumentParser) -> None:
    users_sub = users.add_subparsers(dest="action", required=True)
    add = users_sub.add_parser("add", help="add a user (asks for the password)")
    add.add_argument("name")
    add.add_argument("--password-stdin", action="store_true", help="read it from stdin")
    passwd = users_sub.add_parser("passwd", help="set a user's password (ends its sessions)")
    passwd.add_argument("name")
    passwd.add_argument("--password-stdin", action="store_true", help="read it from stdin")
    users_sub.add_parser("list", help="list users")
    delete = users_sub.add_parser("delete", help="delete a user (never the last one)")
    delete.add_argument("name")
    for parser in users_sub.choices.values():
        parser.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")


def add_key_arguments(keys: argparse.ArgumentParser) -> None:
    keys_sub = keys.add_subparsers(dest="action", required=True)
    create = keys_sub.add_parser("create", help="create a key; it is shown once")
    create.add_argument("name")
    create.add_argument("--models", help="comma-separated model ids it may use (default: all)")
    create.add_argument("--expires-days", type=float, help="valid for this many days")
    _limit_arguments(create, int, float)
    change = keys_sub.add_parser(
        "set", help="change a key's limits, budgets or weight ('none' lifts one)"
    )
    change.add_argument("id")
    _limit_arguments(change, _or_none(int), _or_none(float))
    keys_sub.add_parser("list", help="list keys (never their secrets)")
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id")
    for parser in keys_sub.choices.values():
        parser.add_argument("--config", type=Path, help="config.json (as for `coderai run`)")


def _limit_arguments(parser: argparse.ArgumentParser, whole: Any, real: Any) -> None:
    parser.add_argument("--rpm", type=whole, help="requests per minute")
    parser.add_argument("--tpm", type=whole, help="tokens per minute")
    parser.add_argument("--max-concurrent", type=whole, help="requests at once")
    parser.add_argument("--tokens-per-day", type=whole, help="token budget per UTC day")
    parser.add_argument("--tokens-per-month", type=whole, help="token budget per UTC month")
    parser.add_argument("--weight", type=real, help="share of the queue (fair share; default 1)")


#: the value that lifts a limit in `keys set`
_NONE = object()


def _or_none(kind: Any) -> Any:
    def parse(text: str) -> Any:
        return _NONE if text.lower() == "none" else kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its errors
    return parse


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    """The limits given on the command line, checked as the console checks them."""
    out: dict[str, Any] = {}
    for name in api_keys.LIMITS:
        value = getattr(args, name)
        if value is None:
            continue
        if value is _NONE:
            out[name] = 1.0 if name == "weight" else None
            continue
        flag = "--" + name.replace("_", "-")
        if name == "weight" and not 0.01 <= value <= 100:
            raise SystemExit(f"coderai: {flag} must be from 0.01 to 100")
        if name != "weight" and not 1 <= value <= api_keys.MOST:
            raise SystemExit(f"coderai: {flag} must be from 1 to {api_keys.MOST}")
        out[name] = value
    return out


def run(args: argparse.Namespace) -> int:
    config_path = config_file(args.config)
    files = StateFiles.of(load_config(config_path), config_path)
    db = Database(files.state_dir)
    try:
        if args.command == "users":
            return _users(db, args)
        return _keys(db, args)
    finally:
        db.close()


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise SystemExit("coderai: the passwords differ")
    if len(password) < MIN_PASSWORD:
        raise SystemExit(f"coderai: a password needs at least {MIN_PASSWORD} characters")
    return password


def _users(db: Database, args: argparse.Namespace) -> int:
    if args.action == "list":
        for user in db.users():
            print(user["username"])
        return 0
    if args.action == "delete":
        try:
            found = db.delete_user(args.name)
        except LastUser:
            raise SystemExit("coderai: the last user cannot be deleted") from None
        if not found:
            raise SystemExit(f"coderai: no user named {args.name!r}")
        return 0
    hashed = hash_password(_password(args))
    if args.action == "add" and not db.add_user(args.name, hashed):
        raise SystemExit(f"coderai: a user named {args.name!r} exists")
    if args.action == "passwd" and not db.set_password(args.name, hashed):
        raise SystemExit(f"coderai: no user named {args.name!r}")
    print(f"user {args.name} saved in {db.path.resolve()}")
    return 0


def _keys(db: Database, args: argparse.Namespace) -> int:
    if args.action == "list":
        for key in db.api_keys():
            print(json.dumps(key.public()))
        return 0
    if args.action == "revoke":
        if not db.revoke_key(args.id):
            raise SystemExit(f"coderai: no active key with id {args.id!r}")
        return 0
    limits = _limits(args)
    if args.action == "set":
        changed = db.update_key(args.id, limits)
        if changed is None:
            raise SystemExit(f"coderai: no key with id {args.id!r}")
        print(json.dumps(changed.public()))  # a running server reads it within seconds
        return 0
    models = tuple(m for m in args.models.split(",") if m) if args.models else None
    expires = time.time() + args.expires_days * 86400 if args.expires_days else None
    record, token = api_keys.create(args.name, models, expires, **limits)
    db.add_key(record)
    until = (
        datetime.datetime.fromtimestamp(expires, datetime.UTC).isoformat() if expires else "never"
    )
    print(token)
    print(f"key {record.id} ({args.name}) expires: {until}; it is not shown again", file=sys.stderr)
    return 0
