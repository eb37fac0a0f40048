"""The front's second ROUTER, for engines and nodes on other machines: TCP with CURVE,
and a ZAP handler (pyzmq's ThreadAuthenticator) that lets in only the public keys on the
allow-list (`coderai cluster allow`). An unknown key fails the handshake and never
reaches the dispatcher. Every message carries its peer's key (libzmq's User-Id), so the
dispatcher can tell which allowed key speaks and cut off one whose key was revoked."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import zmq
from zmq.auth.thread import ThreadAuthenticator

from coderai.bus import curve
from coderai.bus.sockets import bind_router
from coderai.common.logthrottle import ThrottledLog

log = logging.getLogger("coderai.front")

ZAP_DOMAIN = "coderai"


class ClusterRouter:
    """Owns the CURVE socket's keys, its authenticator, and the allow-list as last read."""

    def __init__(self, state_dir: Path, endpoint: str) -> None:
        self.endpoint = endpoint
        self._public, self._secret = curve.server_pair(state_dir)
        self._list = curve.AllowList(state_dir)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        #: key -> its name; replaced whole, never changed, so any thread may read it
        self.allowed: dict[str, str] = {}
        self._auth: ThreadAuthenticator | None = None
        self._refusals = ThrottledLog(log)
        self.refresh()

    def bind(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> zmq.Socket[bytes]:
        self._auth = ThreadAuthenticator(ctx, log=logging.getLogger("coderai.zap"))
        self._auth.start()
        self._auth.configure_curve_callback(ZAP_DOMAIN, credentials_provider=self)
        return bind_router(ctx, self.endpoint, curve=(self._public, self._secret, ZAP_DOMAIN))

    def stop(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None

    def callback(self, domain: str, key: bytes) -> bool:
        """ZAP, on the authenticator's thread: is this public key (Z85) allowed now?"""
        self.refresh()
        allowed = key.decode("ascii", "replace") in self.allowed
        if not allowed:  # throttled: a peer retrying in a loop must not flood the log
            self._refusals.warning("refused a bus connection from an unknown CURVE key %s",
                                   key.decode())  # fmt: skip
        return allowed

    def refresh(self) -> None:
        """Read the allow-list again if its file changed (any thread). Who is cut off is
        decided from `allowed` as it stands, never from who noticed the change first."""
        try:
            stat = self._list.path.stat()
            stamp = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = (0, 0, 0)
        with self._lock:
            if stamp == self._stamp:
                return
            try:
                keys = {k: a.name for k, a in self._list.read().items()}
            except Exception as exc:  # a hand-edited file gone wrong: keep what was read
                log.error("cannot read the cluster allow-list: %s", exc)
                return
            self.allowed, self._stamp = keys, stamp
