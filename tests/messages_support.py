"""Reading bus messages in tests."""

from __future__ import annotations

from coderai.bus.messages import Chunks, Message


def text_of(messages: list[Message], job_id: int) -> str:
    """All the text CHUNKS messages carried for one job, in order."""
    out = ""
    for msg in messages:
        if isinstance(msg, Chunks):
            out += dict(zip(msg.deltas[::2], msg.deltas[1::2], strict=True)).get(job_id, "")
    return out
