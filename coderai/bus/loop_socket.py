"""A ZeroMQ socket driven by an asyncio loop without a future per message.

zmq.asyncio wraps every receive in a future and a task switch, which is most of what a bus
hop costs in Python. Here the loop watches the socket's file descriptor and a callback
handles every waiting message in one pass. The descriptor is edge-triggered: any socket
operation (a send included) may consume the edge that announced a message, so after each
send the socket's events are checked again. Only the loop's thread touches the socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import zmq

#: messages handled per wake-up before letting the loop's other callbacks run
DRAIN_BATCH = 64
#: pause between retries while the peer's queue is full (the DEALER's back-pressure)
BLOCKED_RETRY_SECONDS = 0.001


class LoopSocket:
    def __init__(
        self,
        sock: zmq.Socket[bytes],
        loop: asyncio.AbstractEventLoop,
        on_message: Callable[[list[Any]], None],
        *,
        copy: bool = True,
    ) -> None:
        self.sock = sock
        self._loop = loop
        #: given bytes, or (copy=False) zmq.Frames, whose properties (the peer's CURVE
        #: key as User-Id) a CURVE socket's reader needs
        self._on_message = on_message
        self._copy = copy
        self._fd = int(sock.getsockopt(zmq.FD))
        self._scheduled = False
        loop.add_reader(self._fd, self._drain)
        self._schedule()  # anything that arrived before the reader was added

    def _readable(self) -> bool:
        return bool(int(self.sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN)

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        if self.sock.closed:
            return
        for _ in range(DRAIN_BATCH):
            if not self._readable():
                return
            self._on_message(self.sock.recv_multipart(zmq.NOBLOCK, copy=self._copy))
        self._schedule()

    def drain_now(self) -> None:
        """Handle every message waiting now, before what the caller does next (a peer
        that died: what it sent before it died is read first)."""
        while not self.sock.closed and self._readable():
            self._on_message(self.sock.recv_multipart(zmq.NOBLOCK, copy=self._copy))

    def send_nowait(self, frames: list[bytes]) -> zmq.ZMQError | None:
        """Send now or not at all; the error (zmq.Again when the peer's queue is full)."""
        try:
            self.sock.send_multipart(frames, flags=zmq.NOBLOCK)
            return None
        except zmq.ZMQError as exc:
            return exc
        finally:
            if not self.sock.closed and self._readable():
                self._schedule()

    async def send(self, frames: list[bytes]) -> None:
        """Send, waiting while the peer's queue is full; other errors raise."""
        while (error := self.send_nowait(frames)) is not None:
            if not isinstance(error, zmq.Again):
                raise error
            await asyncio.sleep(BLOCKED_RETRY_SECONDS)

    def close(self, linger: int = 0) -> None:
        if not self.sock.closed:
            self._loop.remove_reader(self._fd)
            self.sock.close(linger=linger)
