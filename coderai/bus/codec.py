"""Frame layout: [MAGIC, type, body] where MAGIC carries the protocol version, type is one
byte and body is msgpack. The front's ROUTER prepends the peer identity frame."""

from __future__ import annotations

from typing import Any

import msgpack

from coderai.bus.kinds import MsgType
from coderai.bus.messages import Message, from_body
from coderai.errors import BusProtocolError, ProtocolVersionMismatch

PROTOCOL_VERSION = 1
MAGIC = b"CAI%d" % PROTOCOL_VERSION
_MAGIC_FAMILY = b"CAI"
_TYPE_FRAMES = {t: bytes([t]) for t in MsgType}


def encode(msg: Message) -> list[bytes]:
    return encode_body(msg.TYPE, msg.body())


def encode_body(msg_type: MsgType, body: dict[str, Any]) -> list[bytes]:
    """Encode a body without building a record: the hot path (CHUNKS) uses this."""
    return [MAGIC, _TYPE_FRAMES[msg_type], msgpack.packb(body, use_bin_type=True)]


def decode(frames: list[bytes]) -> Message:
    """Validate and decode the three frames of one message; raise BusProtocolError if bad."""
    if len(frames) != 3:
        raise BusProtocolError(f"expected 3 frames, got {len(frames)}")
    magic, type_frame, body = frames
    if magic != MAGIC:
        if magic.startswith(_MAGIC_FAMILY):
            raise ProtocolVersionMismatch(
                f"peer speaks {magic!r}, this side speaks {MAGIC!r}; upgrade both to one version"
            )
        raise BusProtocolError(f"bad magic frame {magic[:16]!r}")
    if len(type_frame) != 1:
        raise BusProtocolError(f"type frame has {len(type_frame)} bytes, expected 1")
    try:
        msg_type = MsgType(type_frame[0])
    except ValueError:
        raise BusProtocolError(f"unknown message type {type_frame[0]}") from None
    try:
        payload = msgpack.unpackb(body, raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise BusProtocolError(f"{msg_type.name} body is not valid msgpack: {exc}") from None
    return from_body(msg_type, payload)


def unreadable_job_id(frames: list[bytes]) -> int | None:
    """The id of a JOB that failed validation, when it can still be read: its receiver
    answers it with FAIL, so the sender never waits for a job nobody runs (invariant 2)."""
    if len(frames) != 3 or frames[1] != bytes([MsgType.JOB]):
        return None
    try:
        body = msgpack.unpackb(frames[2])
    except Exception:  # any garbage: nothing to answer
        return None
    job_id = body.get("job_id") if isinstance(body, dict) else None
    return job_id if isinstance(job_id, int) and not isinstance(job_id, bool) else None
