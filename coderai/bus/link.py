"""The side of the bus that joins: a DEALER that says HELLO and waits for WELCOME or
REFUSE, keeps the beat the WELCOME sets, notices when its peer falls silent, and backs off
between tries. Engines join their front with it (engine/worker.py), and nodes their head
(front/cluster/uplink.py); what they say and do with the messages is theirs.

Each try is a new incarnation: a new socket under a new identity, so that the ROUTER
never mixes a dead try's frames with a live one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import zmq

from coderai.bus.loop_socket import LoopSocket
from coderai.bus.messages import Refuse, Welcome
from coderai.bus.sockets import connect_dealer

#: waits before a try after one that failed: doubling from the first up to the most
RECONNECT_FIRST = 0.5
RECONNECT_MAX = 30.0


def next_delay(delay: float) -> float:
    """The wait before the next try, after one that failed having waited `delay`."""
    return min(RECONNECT_MAX, max(RECONNECT_FIRST, delay * 2))


def next_epoch(epoch: int) -> int:
    """A new incarnation's epoch: after the last one, and after any an earlier run of the
    process used (milliseconds since the epoch)."""
    return max(epoch + 1, int(time.time() * 1000))


class BusLink:
    """One joining side's connection, through its incarnations."""

    def __init__(
        self,
        ctx: zmq.Context[zmq.Socket[bytes]],
        address: str,
        curve: tuple[bytes, bytes, bytes] | None,
        on_frames: Callable[[list[bytes]], None],
    ) -> None:
        self._ctx = ctx
        self.address = address
        self._curve = curve
        self._on_frames = on_frames
        #: what the last WELCOME set: seconds between beats, and beats of silence after
        #: which the peer is taken for gone
        self.interval = 1.0
        self.liveness = 5
        #: loop time of the last message from the peer
        self.last_heard = 0.0
        #: the wait before the try after the last one (0 once joined)
        self.delay = 0.0
        self._bus: LoopSocket | None = None
        self._answer: asyncio.Future[Welcome | Refuse] | None = None

    @property
    def socket(self) -> LoopSocket:
        assert self._bus is not None, "connect() comes before the socket is used"
        return self._bus

    @property
    def connected(self) -> bool:
        return self._bus is not None

    def connect(self, identity: bytes) -> None:
        """A new socket under `identity` (the last one closed first)."""
        self.close()
        loop = asyncio.get_running_loop()
        self._answer = loop.create_future()
        sock = connect_dealer(self._ctx, self.address, identity, self._curve)
        self._bus = LoopSocket(sock, loop, self._on_frames)

    def heard(self) -> None:
        """The peer was heard from now (its caller says what counts: a frame, or a frame
        that decodes)."""
        self.last_heard = asyncio.get_running_loop().time()

    @property
    def joining(self) -> bool:
        """Whether a HELLO waits for its answer (WELCOME or REFUSE go to `answered`)."""
        return self._answer is not None and not self._answer.done()

    def answered(self, msg: Welcome | Refuse) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(msg)

    async def hello(
        self, hello: list[bytes], timeout: float, stop: asyncio.Event | None = None
    ) -> Welcome | Refuse | None:
        """Say HELLO (encoded) and wait for the answer: None if none came in `timeout`
        seconds, or `stop` was set first. A WELCOME sets the beat and ends the back-off."""
        answer = self._answer
        assert answer is not None, "connect() comes before hello()"
        await self.socket.send(hello)
        waits: list[asyncio.Future[Any]] = [answer]
        stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
        if stopped is not None:
            waits.append(stopped)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stopped is not None:
                stopped.cancel()
        if not answer.done():
            return None
        msg = answer.result()
        if isinstance(msg, Welcome):
            self.interval = msg.heartbeat_interval
            self.liveness = max(1, msg.liveness)
            self.heard()
            self.delay = 0.0
        return msg

    def silence(self) -> float:
        """Seconds since the peer was last heard."""
        return asyncio.get_running_loop().time() - self.last_heard

    def gone(self) -> bool:
        """Whether the peer has been silent past the liveness its WELCOME set."""
        return self.silence() > self.interval * self.liveness

    def backoff(self) -> float:
        """The wait before the next try (doubling)."""
        self.delay = next_delay(self.delay)
        return self.delay

    def close(self, linger: int = 0) -> None:
        if self._bus is not None:
            self._bus.close(linger=linger)
            self._bus = None
