"""Socket construction with the options the bus relies on."""

from __future__ import annotations

import os
import tempfile
from typing import Any, TypeVar

import zmq

from coderai.errors import ConfigError

S = TypeVar("S", bound=zmq.Socket[Any])

#: a frame larger than this is refused by libzmq before it reaches Python
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: the front's queues: what it sends is already bounded by the engines' credit
HIGH_WATER_MARK = 100_000
#: an engine's outgoing queue, in messages. Kept short on purpose: when the front falls
#: behind, the engine's sends stop and its outbox merges the deltas waiting to go, so the
#: front gets fewer, larger messages instead of a deep backlog of small ones.
ENGINE_SEND_QUEUE = 16
#: what the front takes from each engine ahead of handling it, in messages. Short for the
#: same reason: while a fast stream's client lagged, a deep queue here held its text in
#: the front (test_slow_clients' one-off RSS step: 2.5-15.5 MiB over four runs with
#: 100,000; 3.7-4.3 MiB in four runs of five with 256 and 29 MiB in the fifth, so it still
#: varies with what the engine sends before its hold arrives), and the engine's outbox
#: merges what waits behind it instead
FRONT_RECEIVE_QUEUE = 256


def bind_router(
    ctx: zmq.Context[S], endpoint: str, curve: tuple[bytes, bytes, str] | None = None
) -> S:
    """The front's socket. ROUTER_MANDATORY turns a silent drop (unknown peer, full queue)
    into an error the caller handles: without it 4-25 % of a fast stream was lost here.
    With `curve` (public key, secret key, ZAP domain) it is a CURVE server whose peers
    the ZAP handler for that domain admits."""
    sock = ctx.socket(zmq.ROUTER)
    if curve is not None:
        sock.curve_server = True
        sock.curve_publickey, sock.curve_secretkey = curve[0], curve[1]
        sock.zap_domain = curve[2].encode()
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.SNDHWM, HIGH_WATER_MARK)
    sock.setsockopt(zmq.RCVHWM, FRONT_RECEIVE_QUEUE)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(endpoint)
    return sock


def connect_dealer(
    ctx: zmq.Context[S],
    endpoint: str,
    identity: bytes,
    curve: tuple[bytes, bytes, bytes] | None = None,
) -> S:
    """An engine's socket. A DEALER blocks (never drops) at its high-water mark. With
    `curve` (the front's public key, this engine's public and secret keys) it is a CURVE
    client, for a tcp:// bus."""
    sock = ctx.socket(zmq.DEALER)
    if curve is not None:
        sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = curve
    sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.SNDHWM, ENGINE_SEND_QUEUE)
    sock.setsockopt(zmq.RCVHWM, HIGH_WATER_MARK)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    # long enough for BYE or a last DONE to leave on exit, short enough not to hang exit
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(endpoint)
    return sock


def private_runtime_dir() -> str:
    """A fresh 0700 directory for ipc sockets: only this user can connect (invariant 5).
    It is made under CODERAI_RUNTIME_DIR, else XDG_RUNTIME_DIR, else the temp folder."""
    parent = os.environ.get("CODERAI_RUNTIME_DIR") or os.environ.get("XDG_RUNTIME_DIR")
    try:
        path = tempfile.mkdtemp(prefix="coderai-", dir=parent or None)
    except OSError as exc:
        raise ConfigError(
            f"cannot make a runtime folder in {parent or tempfile.gettempdir()}: {exc.strerror}"
            " (set CODERAI_RUNTIME_DIR to an existing, writable folder)"
        ) from None
    os.chmod(path, 0o700)
    return path


def ipc_endpoint(runtime_dir: str, name: str = "bus") -> str:
    return f"ipc://{os.path.join(runtime_dir, name)}.sock"
