"""The hot path's decisions (TextStream): when the bus callback may write a content event
straight into the client's transport, when it must leave the text to the handler, and what
each write counts. Built on a real socket pair, aiohttp's own server protocol and writer; the
handler's side (`relay`) needs a running server and is left to the integration tests."""

from __future__ import annotations

import asyncio
import json
import socket

from aiohttp import HttpVersion11, web
from aiohttp.http_parser import RawRequestMessage
from aiohttp.http_writer import StreamWriter
from aiohttp.streams import EMPTY_PAYLOAD
from aiohttp.web_protocol import RequestHandler
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from coderai.front.api.openai.reply import StreamTemplate
from coderai.front.api.openai.text_relay import TextStream
from coderai.front.metrics import Metrics


def template() -> StreamTemplate:
    return StreamTemplate(True, "chatcmpl-1", 1700000000, "m", False)


async def never_called(request: web.BaseRequest) -> web.StreamResponse:
    raise AssertionError("no request is read in these tests")


def unconnected() -> RequestHandler:
    """aiohttp's protocol for a connection, before its transport is there."""
    return web.Server(never_called)()


def stream_on(protocol: RequestHandler, metrics: Metrics) -> tuple[TextStream, StreamWriter]:
    """A stream for a request on `protocol`, made as aiohttp's server makes one."""
    loop = asyncio.get_running_loop()
    writer = StreamWriter(protocol, loop)
    path = "/v1/chat/completions"
    message = RawRequestMessage("POST", path, HttpVersion11, CIMultiDictProxy(CIMultiDict()),
                                (), False, None, False, False, URL(path))  # fmt: skip
    task = asyncio.current_task()
    assert task is not None
    request = web.Request(message, EMPTY_PAYLOAD, protocol, writer, task, loop)
    return TextStream(template(), request, metrics), writer


async def connected() -> tuple[asyncio.Transport, RequestHandler, socket.socket]:
    """A real transport to a client socket (`peer`) that reads only when told to."""
    ours, peer = socket.socketpair()
    peer.setblocking(False)  # a read with nothing there fails instead of hanging
    loop = asyncio.get_running_loop()
    server = web.Server(never_called)
    transport, protocol = await loop.connect_accepted_socket(server, ours)
    return transport, protocol, peer


def itl_observations(metrics: Metrics) -> int:
    return sum(metrics.itl.counts)


def content_of(event: bytes) -> str:
    """The content of one chat.completion.chunk event ("data: {...}\\n\\n")."""
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    delta = json.loads(event[len(b"data: ") :])["choices"][0]["delta"]
    return str(delta["content"])


def test_an_offer_on_an_open_transport_is_written_at_once_as_one_chunk_and_counted() -> None:
    async def scenario() -> None:
        transport, protocol, peer = await connected()
        stream, writer = stream_on(protocol, Metrics())
        try:
            assert stream.offer("Hello") is True
            sent = peer.recv(65536)
            event = template().content("Hello")
            # HTTP/1.1 chunked framing around exactly one event
            assert sent == b"%x\r\n%b\r\n" % (len(event), event)
            assert content_of(event) == "Hello"
            # counted as aiohttp counts its own writes: toward the next drain and the log
            assert writer.buffer_size == len(sent)
            assert writer.output_size == len(sent)
            assert stream.last is not None
        finally:
            transport.close()
            peer.close()

    asyncio.run(scenario())


def test_offers_count_every_byte_they_write() -> None:
    async def scenario() -> None:
        transport, protocol, peer = await connected()
        stream, writer = stream_on(protocol, Metrics())
        writer.buffer_size = 10  # what aiohttp's own writes left since their last drain
        writer.output_size = 100
        try:
            assert stream.offer("a") and stream.offer("bc")
            sent = peer.recv(65536)
            assert writer.buffer_size == 10 + len(sent)
            assert writer.output_size == 100 + len(sent)
        finally:
            transport.close()
            peer.close()

    asyncio.run(scenario())


def test_an_empty_text_is_accepted_without_writing_or_counting_anything() -> None:
    async def scenario() -> None:
        transport, protocol, peer = await connected()
        metrics = Metrics()
        stream, writer = stream_on(protocol, metrics)
        try:
            assert stream.offer("") is True
            assert (writer.buffer_size, writer.output_size) == (0, 0)
            assert stream.last is None
            assert transport.get_write_buffer_size() == 0
            try:
                peer.recv(65536)
            except BlockingIOError:
                pass
            else:
                raise AssertionError("an empty text was written")
        finally:
            transport.close()
            peer.close()

    asyncio.run(scenario())


def test_an_offer_without_a_transport_is_left_to_the_handler() -> None:
    async def scenario() -> None:
        protocol = unconnected()  # never connected
        stream, writer = stream_on(protocol, Metrics())
        assert stream.offer("Hello") is False
        assert (writer.buffer_size, writer.output_size) == (0, 0)
        assert stream.last is None

    asyncio.run(scenario())


def test_an_offer_while_the_client_lags_is_left_to_the_handler() -> None:
    """Above the transport's high-water mark (the client does not read) the callback does
    not add to its buffer: back-pressure is the handler's write's to wait for."""

    async def scenario() -> None:
        transport, protocol, peer = await connected()
        stream, writer = stream_on(protocol, Metrics())
        try:
            transport.write(b"x" * (32 * 1024 * 1024))  # more than the kernel takes
            assert protocol.writing_paused  # the transport said so itself
            buffered = transport.get_write_buffer_size()
            assert stream.offer("Hello") is False
            assert transport.get_write_buffer_size() == buffered
            assert (writer.buffer_size, writer.output_size) == (0, 0)
            assert stream.last is None
        finally:
            transport.abort()
            peer.close()

    asyncio.run(scenario())


def test_an_offer_once_the_connection_is_closing_is_left_to_the_handler() -> None:
    async def scenario() -> None:
        transport, protocol, peer = await connected()
        stream, writer = stream_on(protocol, Metrics())
        try:
            transport.close()
            assert protocol.transport is transport  # still set until connection_lost runs
            assert stream.offer("Hello") is False
            assert (writer.buffer_size, writer.output_size) == (0, 0)
            assert stream.last is None
        finally:
            peer.close()

    asyncio.run(scenario())


def test_the_handlers_content_is_the_templates_event_unframed() -> None:
    async def scenario() -> None:
        protocol = unconnected()
        stream, writer = stream_on(protocol, Metrics())
        assert stream.content("Hi") == template().content("Hi")
        assert stream.last is not None
        assert writer.output_size == 0  # aiohttp's writer counts what the handler writes

    asyncio.run(scenario())


def test_the_inter_token_gap_is_observed_from_the_second_write_on_whichever_path() -> None:
    async def scenario() -> None:
        transport, protocol, peer = await connected()
        metrics = Metrics()
        stream, _ = stream_on(protocol, metrics)
        try:
            stream.content("a")  # the first content: no gap yet
            assert itl_observations(metrics) == 0
            first = stream.last
            assert stream.offer("b")  # the callback's write shares the same clock
            assert itl_observations(metrics) == 1
            assert stream.last is not None and first is not None and stream.last >= first
            stream.content("c")
            assert itl_observations(metrics) == 2
        finally:
            transport.close()
            peer.close()

    asyncio.run(scenario())


def test_a_refused_offer_observes_no_gap() -> None:
    async def scenario() -> None:
        protocol = unconnected()
        metrics = Metrics()
        stream, _ = stream_on(protocol, metrics)
        stream.content("a")
        assert stream.offer("b") is False
        stream.content("c")
        assert itl_observations(metrics) == 1

    asyncio.run(scenario())
