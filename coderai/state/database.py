"""coderai.db: users, sessions, API keys and usage.

SQLite in WAL mode with synchronous=FULL: a commit is on disk before it returns, and a
process killed at any moment leaves the database as of its last commit. Every method is
one transaction. A `Database` belongs to one thread (sqlite3's default check): the front
keeps one on its state thread (see coderai/front/auth/state_store.py), a CLI command its own.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coderai.state import api_keys
from coderai.state.api_keys import ApiKey

FILENAME = "coderai.db"

#: each entry migrates the schema from version i to i + 1
_MIGRATIONS = [
    """
    CREATE TABLE users (
        username TEXT PRIMARY KEY,
        password_hash TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE sessions (
        token_hash BLOB PRIMARY KEY,
        username TEXT NOT NULL REFERENCES users(username) ON DELETE CASCADE,
        csrf TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL
    );
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        secret_hash BLOB NOT NULL,
        models TEXT,
        expires_at REAL,
        rpm INTEGER,
        tpm INTEGER,
        max_concurrent INTEGER,
        created_at REAL NOT NULL,
        last_used_at REAL,
        revoked_at REAL
    );
    CREATE TABLE usage (
        day TEXT NOT NULL,
        key_id TEXT NOT NULL,
        model TEXT NOT NULL,
        requests INTEGER NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        PRIMARY KEY (day, key_id, model)
    );
    """,
    """
    ALTER TABLE api_keys ADD COLUMN tokens_per_day INTEGER;
    ALTER TABLE api_keys ADD COLUMN tokens_per_month INTEGER;
    ALTER TABLE api_keys ADD COLUMN weight REAL NOT NULL DEFAULT 1.0
    """,
]


@dataclass(frozen=True)
class Session:
    username: str
    csrf: str
    expires_at: float


@dataclass(frozen=True)
class UsageRow:
    day: str
    #: "" for requests made without a key
    key_id: str
    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int


class Database:
    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / FILENAME
        # its owner alone reads it (password hashes); SQLite gives its -wal and -shm files
        # the same permissions
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        # autocommit off by hand: every method opens and commits its own transaction
        self._db = sqlite3.connect(self.path, isolation_level=None, timeout=10.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        with self._transaction():
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            for i, script in enumerate(_MIGRATIONS[version:], start=version):
                for statement in filter(str.strip, script.split(";")):
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version={i + 1}")

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def integrity(self) -> str:
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    # users

    def add_user(self, username: str, password_hash: str) -> bool:
        """False if the name is taken."""
        with self._transaction():
            try:
                self._db.execute(
                    "INSERT INTO users VALUES (?, ?, ?)", (username, password_hash, time.time())
                )
            except sqlite3.IntegrityError:
                return False
        return True

    def set_password(self, username: str, password_hash: str) -> bool:
        """Also ends the user's sessions: a changed password logs everyone out."""
        with self._transaction():
            changed = self._db.execute(
                "UPDATE users SET password_hash = ? WHERE username = ?", (password_hash, username)
            ).rowcount
            self._db.execute("DELETE FROM sessions WHERE username = ?", (username,))
        return bool(changed)

    def password_hash(self, username: str) -> str | None:
        row = self._db.execute(
            "SELECT password_hash FROM users WHERE username = ?", (username,)
        ).fetchone()
        return None if row is None else str(row[0])

    def users(self) -> list[dict[str, object]]:
        rows = self._db.execute("SELECT username, created_at FROM users ORDER BY username")
        return [{"username": name, "created_at": created} for name, created in rows]

    def delete_user(self, username: str) -> bool:
        """False if there is no such user; the last user is never deleted (a server with
        no admin could only be recovered from the command line)."""
        with self._transaction():
            if self.password_hash(username) is None:
                return False
            count = self._db.execute("SELECT count(*) FROM users").fetchone()[0]
            if count <= 1:
                raise LastUser(username)
            deleted = self._db.execute("DELETE FROM users WHERE username = ?", (username,))
        return bool(deleted.rowcount)

    # sessions

    def add_session(self, token_hash: bytes, username: str, csrf: str, expires_at: float) -> None:
        now = time.time()
        with self._transaction():
            self._db.execute("DELETE FROM sessions WHERE expires_at <= ?", (now,))
            self._db.execute(
                "INSERT INTO sessions VALUES (?, ?, ?, ?, ?)",
                (token_hash, username, csrf, now, expires_at),
            )

    def session(self, token_hash: bytes) -> Session | None:
        row = self._db.execute(
            "SELECT username, csrf, expires_at FROM sessions WHERE token_hash = ?", (token_hash,)
        ).fetchone()
        return None if row is None else Session(*row)

    def delete_session(self, token_hash: bytes) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM sessions WHERE token_hash = ?", (token_hash,))

    # API keys

    def add_key(self, key: ApiKey) -> None:
        models = json.dumps(list(key.models)) if key.models is not None else None
        with self._transaction():
            self._db.execute(
                f"INSERT INTO api_keys ({_KEY_COLUMNS}) VALUES ({', '.join('?' * 14)})",
                (
                    key.id, key.name, key.secret_hash, models, key.expires_at, key.rpm,
                    key.tpm, key.max_concurrent, key.tokens_per_day, key.tokens_per_month,
                    key.weight, key.created_at, None, None,
                ),
            )  # fmt: skip

    def update_key(self, key_id: str, limits: dict[str, Any]) -> ApiKey | None:
        """Change a key's limits (fields named in api_keys.LIMITS; None lifts one); the
        key as it now is, or None if there is no key with this id."""
        api_keys.check_limits(limits)
        with self._transaction():
            if limits:
                sets = ", ".join(f"{name} = ?" for name in limits)
                self._db.execute(
                    f"UPDATE api_keys SET {sets} WHERE id = ?", (*limits.values(), key_id)
                )
            return self.key(key_id)

    def key(self, key_id: str) -> ApiKey | None:
        row = self._db.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,))
        found = row.fetchone()
        return None if found is None else _key_from(found)

    def api_keys(self) -> list[ApiKey]:
        rows = self._db.execute(f"SELECT {_KEY_COLUMNS} FROM api_keys ORDER BY created_at")
        return [_key_from(row) for row in rows]

    def revoke_key(self, key_id: str) -> bool:
        with self._transaction():
            cursor = self._db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (time.time(), key_id),
            )
        return bool(cursor.rowcount)

    # usage

    def add_usage(self, rows: Iterable[UsageRow], last_used: dict[str, float]) -> None:
        """Add counts (rows) and record when keys were last used, in one transaction."""
        with self._transaction():
            self._db.executemany(
                """INSERT INTO usage VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (day, key_id, model) DO UPDATE SET
                     requests = requests + excluded.requests,
                     prompt_tokens = prompt_tokens + excluded.prompt_tokens,
                     completion_tokens = completion_tokens + excluded.completion_tokens""",
                [
                    (r.day, r.key_id, r.model, r.requests, r.prompt_tokens, r.completion_tokens)
                    for r in rows
                ],
            )
            self._db.executemany(
                "UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE id = ?",
                [(at, key_id) for key_id, at in last_used.items()],
            )

    def tokens_by_day(self, since_day: str) -> list[tuple[str, str, int]]:
        """(key id, day, prompt and completion tokens) of each key's days since then."""
        rows = self._db.execute(
            """SELECT key_id, day, sum(prompt_tokens + completion_tokens) FROM usage
               WHERE day >= ? AND key_id != '' GROUP BY key_id, day""",
            (since_day,),
        )
        return [(key_id, day, int(tokens)) for key_id, day, tokens in rows]

    def usage(self, since_day: str) -> list[UsageRow]:
        rows = self._db.execute(
            "SELECT * FROM usage WHERE day >= ? ORDER BY day DESC, key_id, model", (since_day,)
        )
        return [UsageRow(*row) for row in rows]


class LastUser(Exception):
    """Deleting this user would leave the server without an admin."""


_KEY_COLUMNS = (
    "id, name, secret_hash, models, expires_at, rpm, tpm, max_concurrent, tokens_per_day, "
    "tokens_per_month, weight, created_at, last_used_at, revoked_at"
)


def _key_from(row: Any) -> ApiKey:
    key_id, name, secret, models, expires, rpm, tpm, concurrent, *rest = row
    per_day, per_month, weight, created, used, revoked = rest
    return ApiKey(
        id=key_id,
        name=name,
        secret_hash=bytes(secret),
        models=tuple(json.loads(models)) if models is not None else None,
        expires_at=expires,
        rpm=rpm,
        tpm=tpm,
        max_concurrent=concurrent,
        tokens_per_day=per_day,
        tokens_per_month=per_month,
        weight=weight,
        created_at=created,
        last_used_at=used,
        revoked_at=revoked,
    )


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT, ROLLBACK on an exception: with isolation_level=None the
    sqlite3 module starts no transaction by itself."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")
