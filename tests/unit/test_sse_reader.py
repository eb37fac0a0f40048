"""The tests' and benchmarks' one SSE reader (tests/support/sse.py), against the bytes the
front's own renderers write: what it reads must not depend on where a stream is cut."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from coderai.bus.messages import Done
from coderai.front.api.event_relay import sse
from coderai.front.api.openai.reply import StreamTemplate
from tests.support.sse import (
    DONE,
    Frame,
    Parser,
    aiter_frames,
    event,
    events,
    frames,
    is_content_delta,
    iter_frames,
    named_events,
    one,
)

#: an Anthropic-like stream: a comment, named events, text that is not ASCII (cut inside
#: a character when fed a byte at a time) and a U+2028 that str.splitlines() would split
ANTHROPIC = (
    b": waiting for the model\n\n"
    + sse("message_start", {"type": "message_start"})
    + b": prompt 5/10 tokens read, 0 cached\n\n"
    + sse("ping", {"type": "ping"})
    + sse("content_block_delta", {"text": "東京 é \u2028 ✓"})
)
WANT = [
    Frame(comment="waiting for the model"),
    Frame("message_start", '{"type":"message_start"}'),
    Frame(comment="prompt 5/10 tokens read, 0 cached"),
    Frame("ping", '{"type":"ping"}'),
]


def test_a_stream_fed_a_byte_at_a_time_reads_as_the_whole_body() -> None:
    whole = frames(ANTHROPIC)
    assert whole[:4] == WANT
    assert whole[4].json() == {"text": "東京 é \u2028 ✓"}
    parser = Parser()
    assert [f for i in range(len(ANTHROPIC)) for f in parser.feed(ANTHROPIC[i : i + 1])] == whole
    assert not parser.pending


def test_crlf_line_ends_cut_between_cr_and_lf_read_the_same() -> None:
    crlf = ANTHROPIC.replace(b"\n", b"\r\n")
    cut = crlf.index(b"\r\n") + 1  # between the first \r and its \n
    assert list(iter_frames([crlf[:cut], crlf[cut:]])) == frames(ANTHROPIC)


def test_a_frame_is_complete_only_at_its_blank_line() -> None:
    parser = Parser()
    assert parser.feed("event: log\ndata: {}\n") == []
    assert parser.pending
    assert parser.feed("\n") == [Frame("log", "{}")]
    assert not parser.pending


def test_fields_follow_the_standard() -> None:
    body = "data:one\ndata: two\nid: 7\nretry: 10\n\nevent: empty\n\ndata\n\n"
    # data lines join; one space after the colon is dropped; an event with no data is none
    assert frames(body) == [Frame("", "one\ntwo"), Frame("", "")]


def test_whole_bodies_must_end_between_frames() -> None:
    with pytest.raises(ValueError, match="ends inside a frame"):
        frames(b"data: {}\n")
    with pytest.raises(ValueError, match="2 frames"):
        one(b": ping\n\ndata: {}\n\n")
    with pytest.raises(ValueError, match="nameless"):
        named_events(b"data: {}\n\n")
    assert named_events(sse("e", {"a": 1})) == [("e", {"a": 1})]


def test_openai_streams_read_alike_line_by_line_and_as_frames() -> None:
    template = StreamTemplate(True, "c", 1, "m", include_usage=True)
    raw = template.opening() + template.content("hi") + template.closing(Done(1, "stop", 1, 1))
    evs = events(raw)
    assert [f.json() for f in frames(raw)] == evs
    assert evs[-1] is DONE and event(raw.split(b"\n")[0]) == evs[0]


def test_the_hot_loops_content_test_finds_content_deltas_only() -> None:
    template = StreamTemplate(True, "c", 1, "m", include_usage=True)
    lines = [
        *template.opening().split(b"\n"),
        *template.content("a").split(b"\n"),
        *template.closing(Done(1, "stop", 1, 1)).split(b"\n"),
    ]
    assert [line for line in lines if is_content_delta(line)] == [
        template.content("a").split(b"\n")[0]
    ]


def test_aiohttp_pieces_read_as_they_come() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(ANTHROPIC), 7):
            yield ANTHROPIC[i : i + 7]

    async def read() -> list[Frame]:
        return [frame async for frame in aiter_frames(pieces())]

    assert asyncio.run(read()) == frames(ANTHROPIC)
