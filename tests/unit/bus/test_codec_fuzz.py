"""Property-based tests of the bus codec (hypothesis): every message type survives a round
trip, and no frames whatever make decode raise anything but BusProtocolError."""

from __future__ import annotations

import contextlib
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from coderai.bus.checker import field_specs
from coderai.bus.codec import MAGIC, decode, encode, encode_body
from coderai.bus.kinds import MsgType
from coderai.bus.messages import RECORDS
from coderai.errors import BusProtocolError

#: what msgpack carries as-is: 64-bit ints, finite floats, text, and containers of them
SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.text(),
    st.floats(allow_nan=False),
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
BY_TYPE: dict[type, st.SearchStrategy[Any]] = {
    str: st.text(),
    int: st.integers(-(2**63), 2**63 - 1),
    float: st.floats(allow_nan=False),
    bool: st.booleans(),
    type(None): st.none(),
    list: st.lists(VALUES, max_size=4),
    dict: st.dictionaries(st.text(), VALUES, max_size=4),
}


@st.composite
def bodies(draw: st.DrawFn) -> tuple[MsgType, dict[str, Any]]:
    """A message type and a body its record accepts: every required field, some optional
    ones, each of one of the types the field's annotation admits."""
    msg_type = draw(st.sampled_from(sorted(RECORDS)))
    body = {}
    for spec in field_specs(RECORDS[msg_type]):
        if spec.required or draw(st.booleans()):
            body[spec.name] = draw(st.one_of(*(BY_TYPE[t] for t in spec.accepts)))
    return msg_type, body


@settings(max_examples=400, deadline=None)
@given(bodies())
def test_every_message_type_survives_a_round_trip(
    typed_body: tuple[MsgType, dict[str, Any]],
) -> None:
    msg_type, body = typed_body
    msg = decode(encode_body(msg_type, body))
    assert type(msg) is RECORDS[msg_type]
    assert {k: v for k, v in msg.body().items() if k in body} == body
    assert decode(encode(msg)) == msg


def refused_or_decoded(frames: list[bytes]) -> None:
    # refused, naming the fault, is the only way decode may fail: any other exception
    # escapes and fails the test
    with contextlib.suppress(BusProtocolError):
        decode(frames)


FRAME = st.binary(max_size=64)
TYPE_FRAME = st.sampled_from([bytes([t]) for t in MsgType]) | st.binary(max_size=2)
MAGICS = st.just(MAGIC) | st.sampled_from([b"CAI0", b"CAI2", b"CAI", b""]) | FRAME


@settings(max_examples=600, deadline=None)
@given(st.lists(FRAME, max_size=5))
def test_arbitrary_frames_are_refused_with_a_protocol_error(frames: list[bytes]) -> None:
    refused_or_decoded(frames)


@settings(max_examples=600, deadline=None)
@given(MAGICS, TYPE_FRAME, st.binary(max_size=256))
def test_any_body_bytes_are_refused_with_a_protocol_error(
    magic: bytes, type_frame: bytes, body: bytes
) -> None:
    refused_or_decoded([magic, type_frame, body])


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(sorted(RECORDS)), VALUES | st.dictionaries(st.text(), VALUES))
def test_wrong_shapes_and_types_in_a_valid_frame_are_refused(msg_type: MsgType, value: Any) -> None:
    refused_or_decoded(encode_body(msg_type, value) if isinstance(value, dict) else
                       [MAGIC, bytes([msg_type]), msgpack.packb(value)])  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(bodies(), st.data())
def test_a_body_cut_short_is_refused(
    typed: tuple[MsgType, dict[str, Any]], data: st.DataObject
) -> None:
    packed = encode_body(*typed)
    cut = data.draw(st.integers(0, max(0, len(packed[2]) - 1)))
    refused_or_decoded([packed[0], packed[1], packed[2][:cut]])


def test_invalid_utf8_text_and_huge_ints_are_refused() -> None:
    bad_text = b"\x81\xa4text\xa2\xff\xfe"  # {"text": <2 bytes that are not UTF-8>}
    huge = msgpack.packb({"job_id": 2**64 - 1})
    for body in (bad_text, huge, b"\xc1", b"\x81" * 10_000):
        for msg_type in RECORDS:
            refused_or_decoded([MAGIC, bytes([msg_type]), body])
