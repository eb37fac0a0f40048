"""The dispatcher on a real ROUTER socket, with test peers as engines."""

from __future__ import annotations

import asyncio
from pathlib import Path

import zmq
import zmq.asyncio

from coderai.bus.codec import decode, encode
from coderai.bus.messages import Hello, Job, Welcome
from coderai.config import ModelEntry, ServerConfig
from coderai.errors import EngineFailed
from coderai.front.dispatcher import Dispatcher
from coderai.front.jobs import FrontJob

TOKEN = "t0ken"


async def _joined_engine(endpoint: str) -> zmq.asyncio.Socket:
    ctx = zmq.asyncio.Context.instance()
    peer = ctx.socket(zmq.DEALER)
    peer.setsockopt(zmq.IDENTITY, b"e:1")
    peer.connect(endpoint)
    await peer.send_multipart(encode(Hello("e", 1, 1, "cpu", ["fake"], 2, TOKEN)))
    assert isinstance(decode(await peer.recv_multipart()), Welcome)
    return peer


def test_a_send_to_an_engine_that_vanished_loses_it_and_fails_its_job(tmp_path: Path) -> None:
    async def scenario() -> None:
        endpoint = f"ipc://{tmp_path}/bus.sock"
        dispatcher = Dispatcher(ServerConfig(), endpoint, TOKEN)
        await dispatcher.start()
        try:
            peer = await _joined_engine(endpoint)
            entry = ModelEntry(id="m", format="fake")
            job = FrontJob(1, entry, "fake", Job(1, entry.spec("fake"), "completion", "hi"))
            dispatcher.submit(job)
            assert isinstance(decode(await peer.recv_multipart()), Job)
            job.push("first token")  # it started, so it cannot move elsewhere
            peer.close(linger=0)  # the engine is gone without a word
            await asyncio.sleep(0.2)
            dispatcher.cancel(job)  # this CANCEL has nowhere to go
            await asyncio.sleep(0.05)
            assert dispatcher.registry.all() == []
            assert isinstance(job.outcome, EngineFailed)
        finally:
            await dispatcher.stop()

    asyncio.run(scenario())
