"""Who may join the bus, and as what: the checks a HELLO passes before an engine is
registered, and whether a remote engine's key still lets it stay. Pure decisions over
plain values; the dispatcher acts on them (it refuses, drops and cuts off).

A local engine proves the per-run secret; a remote one (TCP with CURVE) proves its key,
which is allowed under one engine name only (`coderai cluster allow`).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from coderai.bus.messages import Hello
from coderai.front.dispatch.registry import EngineRecord

#: the most slots a remote engine (a node) may say it has: a node is trusted with its key,
#: not with the head's memory (bounded as server.max_parallel_requests is)
MOST_OWN_SLOTS = 4096


def token_matches(sent: str, expected: str) -> bool:
    """A local engine's HELLO carries the per-run secret (compared in constant time)."""
    return hmac.compare_digest(sent.encode(), expected.encode())


def identity_matches(identity: bytes, hello: Hello, remote: bool) -> bool:
    """A local engine's routing id is name:epoch; a remote one's adds a random part, so
    that another key cannot guess it from /healthz and take it over while it is away."""
    base = f"{hello.name}:{hello.epoch}".encode()
    if not remote:
        return identity == base
    nonce = identity[len(base) + 1 :]
    return identity.startswith(base + b":") and len(nonce) == 16 and nonce.isalnum()


def name_refused(
    name: str,
    key: str | None,
    pid: int,
    current: EngineRecord | None,
    allowed: Mapping[str, str] | None,
    local_names: set[str],
    current_alive: bool,
) -> str | None:
    """Why an engine may not join under this name (None: it may). A remote engine
    joins under the name its key was allowed with, and never as a local engine; a
    local engine never replaces a remote one; and a second process never replaces a
    remote engine that is alive (one key run twice would take the name in turns).
    `current` is the engine registered under the name now, `allowed` the cluster's keys
    (None: no cluster), `local_names` the engines this front's host runs."""
    if key is None:
        if current is not None and current.remote_key is not None:
            return f"the name {name!r} is a remote engine's"
        return None
    allowed_name = allowed.get(key) if allowed is not None else None
    if allowed_name != name:
        return f"this key joins as {allowed_name!r}, not {name!r} (coderai cluster list)"
    if name in local_names or (current is not None and current.remote_key is None):
        return f"the name {name!r} is a local engine's"
    if current is not None and current.pid != pid and current_alive:
        return (f"the name {name!r} is held by a live process (pid {current.pid}) with"
                " this key: is the key used twice?")  # fmt: skip
    return None


def alive(record: EngineRecord, now: float, heartbeat_interval: float) -> bool:
    """Heard from within two heartbeat intervals, and not on its way out (draining: an
    admin restart asked it to join again; missing: PINGed after a silence). A process
    that died is lost sooner: the next keepalive PING finds its connection gone."""
    fresh = now - record.last_seen < 2 * heartbeat_interval
    return fresh and not record.draining and not record.missing


def own_slots(key: str | None, slots: int) -> int | None:
    """The slots a remote engine says it has, bounded (None for a local engine, whose
    slots the front's settings give)."""
    return min(slots, MOST_OWN_SLOTS) if key is not None and slots >= 1 else None


def still_allowed(remote_key: str | None, allowed: Mapping[str, str] | None) -> bool:
    """Whether a remote engine's key is still allowed (a revoked one is cut off)."""
    return allowed is not None and remote_key in allowed
