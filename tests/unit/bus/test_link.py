"""The joining side of the bus (bus/link.py) against a real ROUTER in this process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import zmq

from coderai.bus.codec import decode, encode
from coderai.bus.link import RECONNECT_FIRST, RECONNECT_MAX, BusLink, next_delay, next_epoch
from coderai.bus.messages import Hello, Message, Ping, Refuse, Welcome
from coderai.bus.sockets import bind_router

HELLO = Hello(name="e", epoch=1, pid=1, backend="cpu", capabilities=[], slots=1, token="t")


@asynccontextmanager
async def joined_pair(
    tmp_path: Path,
) -> AsyncIterator[tuple[BusLink, zmq.Socket[bytes], list[Message]]]:
    """A link to a ROUTER bound here, and the messages given to it (as a caller does:
    each heard, a WELCOME or REFUSE answering a HELLO)."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    endpoint = f"ipc://{tmp_path}/bus.sock"
    router = bind_router(ctx, endpoint)
    heard: list[Message] = []

    def on_frames(frames: list[bytes]) -> None:
        link.heard()
        msg = decode(frames)
        heard.append(msg)
        if isinstance(msg, Welcome | Refuse) and link.joining:
            link.answered(msg)

    link = BusLink(ctx, endpoint, None, on_frames)
    try:
        yield link, router, heard
    finally:
        link.close()
        router.close(linger=0)
        ctx.term()


async def answer(router: zmq.Socket[bytes], msg: Message | None) -> Message:
    """Read what the link sent (off the loop: the router is a plain socket) and answer."""
    assert await asyncio.to_thread(router.poll, 10_000), "the link sent nothing"
    identity, *frames = router.recv_multipart()
    if msg is not None:
        router.send_multipart([identity, *encode(msg)])
    return decode(frames)


def test_a_welcome_sets_the_beat_and_ends_the_back_off(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with joined_pair(tmp_path) as (link, router, heard):
            link.backoff()
            link.backoff()
            assert link.delay == 2 * RECONNECT_FIRST
            link.connect(b"e:1")
            welcome = Welcome(heartbeat_interval=0.25, liveness=3)
            said, got = await asyncio.gather(answer(router, welcome), link.hello(encode(HELLO), 5))
            assert said == HELLO and got == welcome and heard == [welcome]
            assert (link.interval, link.liveness, link.delay) == (0.25, 3, 0.0)
            assert not link.joining and not link.gone()
            # silent past 3 beats of 0.25 s: gone (the bound derived from the WELCOME)
            link.last_heard -= 0.76
            assert link.gone() and link.silence() >= 0.76

    asyncio.run(scenario())


def test_a_message_from_the_peer_is_heard(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with joined_pair(tmp_path) as (link, router, heard):
            link.connect(b"e:1")
            welcome = Welcome(heartbeat_interval=1.0, liveness=5)
            await asyncio.gather(answer(router, welcome), link.hello(encode(HELLO), 5))
            link.last_heard -= 100
            assert link.gone()
            await asyncio.to_thread(router.send_multipart, [b"e:1", *encode(Ping(ref=1))])
            async with asyncio.timeout(10):
                while len(heard) < 2:
                    await asyncio.sleep(0.01)
            assert heard[-1] == Ping(ref=1) and not link.gone()

    asyncio.run(scenario())


def test_a_refusal_is_the_answer_and_sets_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with joined_pair(tmp_path) as (link, router, _):
            link.backoff()
            link.connect(b"e:1")
            refuse = Refuse(reason="bad token")
            _, got = await asyncio.gather(answer(router, refuse), link.hello(encode(HELLO), 5))
            assert got == refuse and (link.interval, link.liveness) == (1.0, 5)
            assert link.delay == RECONNECT_FIRST  # the back-off goes on

    asyncio.run(scenario())


@pytest.mark.parametrize("stop_first", [True, False])
def test_no_answer_is_none_when_the_time_is_up_or_a_stop_comes(
    tmp_path: Path, stop_first: bool
) -> None:
    async def scenario() -> None:
        async with joined_pair(tmp_path) as (link, router, _):
            link.connect(b"e:1")
            stop = asyncio.Event()
            if stop_first:
                stop.set()
            timeout = 3600 if stop_first else 0.05  # a stop must end the wait by itself
            hello = link.hello(encode(HELLO), timeout, stop)
            _, got = await asyncio.gather(answer(router, None), hello)
            assert got is None and link.joining

    asyncio.run(scenario())


def test_back_off_doubles_up_to_its_most_and_epochs_only_grow() -> None:
    delays = [0.0]
    for _ in range(10):
        delays.append(next_delay(delays[-1]))
    assert delays[1:4] == [RECONNECT_FIRST, 2 * RECONNECT_FIRST, 4 * RECONNECT_FIRST]
    assert max(delays) == RECONNECT_MAX == delays[-1]
    assert next_epoch(1) > 10**12  # milliseconds: after any earlier run's
    far = 10**15
    assert next_epoch(far) == far + 1


def test_a_welcome_read_with_a_stop_still_joins(tmp_path: Path) -> None:
    """A front that welcomes and at once says stop: the side has joined (it then leaves
    with a BYE), so the WELCOME is the answer."""

    async def scenario() -> None:
        async with joined_pair(tmp_path) as (link, router, _):
            link.connect(b"e:1")
            stop = asyncio.Event()
            welcome = Welcome(heartbeat_interval=0.5, liveness=2)
            link.answered(welcome)  # both are there before the wait begins
            stop.set()
            got = await link.hello(encode(HELLO), 3600, stop)
            assert got == welcome and link.interval == 0.5
            await answer(router, None)

    asyncio.run(scenario())


def test_each_connect_is_a_new_socket_under_its_new_identity(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with joined_pair(tmp_path) as (link, router, _):
            link.connect(b"e:1")
            first = link.socket
            link.connect(b"e:2")
            assert first.sock.closed and link.socket is not first and link.joining
            hello = asyncio.ensure_future(link.hello(encode(HELLO), 5))
            assert await asyncio.to_thread(router.poll, 10_000)
            identity, *frames = router.recv_multipart()
            assert identity == b"e:2" and decode(frames) == HELLO
            welcome = Welcome(heartbeat_interval=1.0, liveness=5)
            router.send_multipart([identity, *encode(welcome)])
            assert await hello == welcome
            link.close()
            assert not link.connected

    asyncio.run(scenario())
