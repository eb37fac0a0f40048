"""API keys for /v1: `cai-<id>-<secret>`. The id is public (it names the key in the
console and finds its row); only a hash of the secret is stored. Secrets are 256 random
bits, so one round of SHA-256 is enough: nothing can be guessed from the hash, and a
lookup costs microseconds on the request path."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

PREFIX = "cai-"
_SHAPE = re.compile(r"cai-([0-9a-f]{12})-([A-Za-z0-9_-]{43})")


@dataclass(frozen=True)
class ApiKey:
    id: str
    name: str
    secret_hash: bytes
    #: the models it may use; None: every model
    models: tuple[str, ...] | None = None
    #: unix seconds; None: never
    expires_at: float | None = None
    #: requests per minute, tokens per minute, requests at once; None: unlimited
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    #: budgets: tokens (prompt and completion) per UTC day and per UTC month; None: none
    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    #: its share of the queue against other keys' (fair share, front/dispatch/queue.py)
    weight: float = 1.0
    created_at: float = 0.0
    last_used_at: float | None = None
    revoked_at: float | None = None

    def matches(self, secret: str) -> bool:
        return hmac.compare_digest(secret_hash(secret), self.secret_hash)

    def usable(self, now: float) -> bool:
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def allows(self, model_names: tuple[str, ...]) -> bool:
        """Whether it may use a model known by these names (its id and alias)."""
        return self.models is None or any(name in self.models for name in model_names)

    def public(self) -> dict[str, object]:
        """What the console shows: never the hash."""
        return {
            "id": self.id,
            "name": self.name,
            "prefix": f"{PREFIX}{self.id}-",
            "models": list(self.models) if self.models is not None else None,
            "expires_at": self.expires_at,
            "rpm": self.rpm,
            "tpm": self.tpm,
            "max_concurrent": self.max_concurrent,
            "tokens_per_day": self.tokens_per_day,
            "tokens_per_month": self.tokens_per_month,
            "weight": self.weight,
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "revoked": self.revoked_at is not None,
        }


#: what may be changed on a key after it is made (its limits, budgets and weight)
LIMITS = ("rpm", "tpm", "max_concurrent", "tokens_per_day", "tokens_per_month", "weight")
#: the largest whole limit (SQLite holds 64-bit integers; this is ample and exact in JSON)
MOST = 2**53


def check_limits(limits: dict[str, Any]) -> None:
    """Only LIMITS may be set: their names become SQL (database.update_key)."""
    unknown = set(limits) - set(LIMITS)
    if unknown:
        raise ValueError(f"not a key's limit: {sorted(unknown)}")


def create(
    name: str,
    models: tuple[str, ...] | None = None,
    expires_at: float | None = None,
    **limits: Any,
) -> tuple[ApiKey, str]:
    """A new key's record (to store) and the key itself (to show once, then forget);
    `limits` are fields named in LIMITS."""
    check_limits(limits)
    key_id, secret, token = new_key()
    record = ApiKey(
        key_id, name, secret_hash(secret), models, expires_at, created_at=time.time(), **limits
    )
    return record, token


def secret_hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def new_key() -> tuple[str, str, str]:
    """(id, secret, the whole key as the client sends it)."""
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return key_id, secret, f"{PREFIX}{key_id}-{secret}"


def split(token: str) -> tuple[str, str] | None:
    """(id, secret) of a token shaped like a key, else None."""
    match = _SHAPE.fullmatch(token)
    return (match[1], match[2]) if match else None
