"""A sequence stepped alone on a loaded instance, its text read as the scheduler reads it:
for tests that drive a backend directly, without the bus."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from coderai.engine.backends.base import END, PENDING, READING, Sequence
from coderai.engine.decoding import structured
from coderai.engine.decoding.call_delta import CallDelta


def pieces(instance: Any, seq: Sequence, steps: int) -> Iterator[str]:
    """The text of each token it makes, within `steps` steps, until it ends or reaches
    its max_tokens (which the scheduler would enforce: past it, a sequence outgrows the
    cells it was promised)."""
    made = 0
    for _ in range(steps):
        result = instance.step([seq])[0]
        if result is END:
            return
        if result is READING or result is PENDING:
            continue
        assert isinstance(result, str), result
        yield result
        made += 1
        if made == seq.job.max_tokens:
            return


def text_of(instance: Any, seq: Sequence, steps: int) -> str:
    """Its whole text (pieces); the sequence is released."""
    text = "".join(pieces(instance, seq, steps))
    instance.release(seq)
    return text


def call_deltas(instance: Any, seq: Sequence, steps: int) -> list[CallDelta]:
    """The call deltas of up to `steps` tokens: until the output ends, or its one call
    does (parallel calls off: the scheduler ends the answer there), then what the parser
    held. The sequence is released."""
    deltas: list[CallDelta] = []
    for piece in pieces(instance, seq, steps):
        deltas += structured.read(seq, piece).calls
        if seq.parser.done:
            break
    deltas += structured.read(seq, "", end=True).calls
    instance.release(seq)
    return deltas
