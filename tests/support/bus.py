"""The bus in tests: engine peers a test drives by hand, a dispatcher on a real socket,
and reading what CHUNKS carried."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from coderai.bus.codec import decode, encode
from coderai.bus.messages import Chunks, Hello, Job, Message, Welcome
from coderai.catalogue.entries import ModelEntry
from coderai.config import ServerConfig
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.jobs import FrontJob


def text_of(messages: list[Message], job_id: int) -> str:
    """All the text CHUNKS messages carried for one job, in order."""
    out = ""
    for msg in messages:
        if isinstance(msg, Chunks):
            out += dict(zip(msg.deltas[::2], msg.deltas[1::2], strict=True)).get(job_id, "")
    return out


TOKEN = "t0ken"


class Peer:
    """A test engine on the bus: it says HELLO and reads what the front sends it."""

    def __init__(self, endpoint: str, name: str, slots: int) -> None:
        self.name = name
        self.sock = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, f"{name}:1".encode())
        self.sock.connect(endpoint)
        self.slots = slots

    async def join(self) -> None:
        await self.send(Hello(self.name, 1, 1, "cpu", ["fake"], self.slots, TOKEN))
        assert isinstance(await self.recv(), Welcome)

    async def send(self, msg: Message) -> None:
        await self.sock.send_multipart(encode(msg))

    async def recv(self) -> Message:
        async with asyncio.timeout(5):
            return decode(await self.sock.recv_multipart())

    async def job_ids(self, count: int) -> list[int]:
        ids: list[int] = []
        while len(ids) < count:
            msg = await self.recv()
            if isinstance(msg, Job):
                ids.append(msg.job_id)
        return ids

    def close(self) -> None:
        self.sock.close(linger=0)


@asynccontextmanager
async def bus(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[Dispatcher, str]]:
    endpoint = f"ipc://{tmp_path}/bus.sock"
    dispatcher = Dispatcher(ServerConfig(**settings), endpoint, TOKEN)
    await dispatcher.start()
    try:
        yield dispatcher, endpoint
    finally:
        await dispatcher.stop()


def job(job_id: int, model: str = "m") -> FrontJob:
    entry = ModelEntry(id=model, format="fake")
    return FrontJob(job_id, entry, "fake", Job(job_id, entry.spec("fake"), "completion", "hi"))


async def until(cond: Callable[[], object], limit: float) -> None:
    async with asyncio.timeout(limit):
        while not cond():
            await asyncio.sleep(0.005)


@contextmanager
def intruder(endpoint: str) -> Iterator[zmq.Socket[bytes]]:
    """A DEALER on the front's bus that has not said HELLO (or says it wrongly)."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    peer = ctx.socket(zmq.DEALER)
    peer.setsockopt(zmq.IDENTITY, b"intruder:1")
    peer.connect(endpoint)
    try:
        yield peer
    finally:
        peer.close(linger=0)
        ctx.term()
