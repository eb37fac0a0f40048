"""A sequence stepped alone on a loaded instance, its text read as the scheduler reads it:
for tests that drive a backend directly, without the bus."""

from __future__ import annotations

from typing import Any

from coderai.engine.backends import structured
from coderai.engine.backends.base import END, PENDING, READING, Sequence
from coderai.engine.decoding.call_delta import CallDelta


def call_deltas(instance: Any, seq: Sequence, steps: int) -> list[CallDelta]:
    """The call deltas of up to `steps` tokens: until the output ends, or its one call
    does (parallel calls off: the scheduler ends the answer there), then what the parser
    held. The sequence is released."""
    deltas: list[CallDelta] = []
    for _ in range(steps):
        result = instance.step([seq])[0]
        if result is END:
            break
        if result is READING or result is PENDING:
            continue
        assert isinstance(result, str), result
        deltas += structured.read(seq, result).calls
        if seq.parser.done:
            break
    deltas += structured.read(seq, "", end=True).calls
    instance.release(seq)
    return deltas
