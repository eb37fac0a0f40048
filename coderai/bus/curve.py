"""CURVE keys for engines and nodes on other machines (invariant 5): libzmq's CURVE
encrypts and authenticates the TCP bus, and ZAP (pyzmq's authenticator) lets in only the
public keys on the front's allow-list. Keys are Z85 text, in pyzmq's certificate files
(`NAME.key` holds the public key, `NAME.key_secret` both).

The front's files live in `<state_dir>/cluster/` (0700): its key pair (`server.key`,
`server.key_secret`) and the allow-list (`allowed.json`, 0600), which `coderai cluster`
edits while the front runs; the front reads it again whenever it changes."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.auth

from coderai.common.json_files import read_json, write_json_atomically
from coderai.errors import ConfigError

SERVER = "server"
ALLOWED = "allowed.json"


def cluster_dir(state_dir: Path) -> Path:
    folder = state_dir / "cluster"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # the secret key is written here
    return folder


def create_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """A new key pair in `folder`: (public file, secret file); the secret is 0600."""
    public, secret = zmq.auth.create_certificates(folder, name)
    os.chmod(secret, 0o600)
    return Path(public), Path(secret)


def server_pair(state_dir: Path) -> tuple[bytes, bytes]:
    """The front's key pair, made on first use: (public, secret), Z85."""
    folder = cluster_dir(state_dir)
    secret_file = folder / f"{SERVER}.key_secret"
    if not secret_file.exists():
        create_pair(folder, SERVER)
    return load_pair(secret_file)


def load_pair(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) from a secret key file."""
    public, secret = _load(path)
    if secret is None:
        raise ConfigError(f"{path} holds no secret key (it is a public key file)")
    return public, secret


def load_public(path: Path) -> bytes:
    return _load(path)[0]


def _load(path: Path) -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read a CURVE key from {path}: {exc}") from None
    check_key(public.decode("ascii", "replace"))
    return public, secret


def check_key(key: str) -> str:
    """A CURVE public key in Z85: 40 characters encoding 32 bytes."""
    try:
        ok = len(key) == 40 and len(zmq.utils.z85.decode(key)) == 32
    except (ValueError, KeyError, UnicodeError):
        ok = False
    if not ok:
        raise ConfigError(f"{key!r} is not a CURVE public key (40 characters of Z85)")
    return key


@dataclass(frozen=True)
class Allowed:
    key: str
    name: str
    added: float


class AllowList:
    """The public keys that may join the bus over TCP, with a name for each."""

    def __init__(self, state_dir: Path) -> None:
        self.path = cluster_dir(state_dir) / ALLOWED

    def read(self) -> dict[str, Allowed]:
        if not self.path.exists():
            return {}
        data: Any = read_json(self.path)
        rows = data.get("keys", []) if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise ConfigError(f"{self.path}: expected {{'keys': [...]}}")
        out: dict[str, Allowed] = {}
        for row in rows:
            if not isinstance(row, dict) or not isinstance(row.get("name"), str):
                raise ConfigError(f"{self.path}: each key needs a key and a name")
            key = check_key(str(row.get("key")))
            if any(a.name == row["name"] for a in out.values()):
                raise ConfigError(f"{self.path}: two keys are named {row['name']!r}")
            out[key] = Allowed(key, row["name"], float(row.get("added", 0)))
        return out

    def allow(self, key: str, name: str) -> Allowed:
        keys = self.read()
        check_key(key)
        if any(a.name == name and a.key != key for a in keys.values()):
            raise ConfigError(f"the name {name!r} is taken by another key")
        keys[key] = Allowed(key, name, time.time())
        self._write(keys)
        return keys[key]

    def revoke(self, key_or_name: str) -> Allowed:
        keys = self.read()
        found = keys.get(key_or_name) or next(
            (a for a in keys.values() if a.name == key_or_name), None
        )
        if found is None:
            raise ConfigError(f"no allowed key is {key_or_name!r}")
        del keys[found.key]
        self._write(keys)
        return found

    def _write(self, keys: dict[str, Allowed]) -> None:
        rows = [{"key": a.key, "name": a.name, "added": a.added} for a in keys.values()]
        if not self.path.exists():
            self.path.touch(mode=0o600)
        write_json_atomically(self.path, {"keys": rows})
