"""A job's output beyond plain text, as it arrives from an engine: content, tool-call deltas
and token log-probabilities, checked at the edge (a malformed delta is a bus protocol
error, never a crash deeper in a handler).

An engine sends a job's delta as its text (the hot path, untouched here), or as a map
{"text", "reasoning", "calls", "logprobs"} (scheduler._emit), or a list of both in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coderai.errors import BusProtocolError


@dataclass
class CallPiece:
    index: int
    name: str
    arguments: str


@dataclass
class TokenLogprob:
    token: bytes
    logprob: float
    top: list[tuple[bytes, float]]

    @property
    def text(self) -> str:
        return self.token.decode("utf-8", errors="replace")


@dataclass
class Piece:
    """One structured delta."""

    text: str = ""
    calls: list[CallPiece] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    #: a reasoning model's thinking (decoding/reasoning.py), apart from its answer
    reasoning: str = ""


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BusProtocolError(f"a logprob is {type(value).__name__}, not a number")
    return float(value)


def _bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    raise BusProtocolError(f"a token is {type(value).__name__}, not bytes")


def _call(item: object) -> CallPiece:
    if not (isinstance(item, list) and len(item) == 3):
        raise BusProtocolError("a call delta is not [index, name, arguments]")
    index, name, arguments = item
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 1 << 16:
        raise BusProtocolError("a call delta's index is not a small int")
    if not isinstance(name, str) or not isinstance(arguments, str):
        raise BusProtocolError("a call delta's name and arguments are not strings")
    return CallPiece(index, name, arguments)


def _logprob(item: object) -> TokenLogprob:
    if not (isinstance(item, list) and len(item) == 3 and isinstance(item[2], list)):
        raise BusProtocolError("a logprob entry is not [token, logprob, top]")
    top = []
    for alt in item[2]:
        if not (isinstance(alt, list) and len(alt) == 2):
            raise BusProtocolError("a top logprob is not [token, logprob]")
        top.append((_bytes(alt[0]), _number(alt[1])))
    return TokenLogprob(_bytes(item[0]), _number(item[1]), top)


def piece(delta: object) -> Piece:
    if isinstance(delta, str):
        return Piece(text=delta)
    if not isinstance(delta, dict):
        raise BusProtocolError(f"a CHUNKS delta is {type(delta).__name__}")
    text = delta.get("text", "")
    calls = delta.get("calls", [])
    logprobs = delta.get("logprobs", [])
    reasoning = delta.get("reasoning", "")
    if not (
        isinstance(text, str)
        and isinstance(calls, list)
        and isinstance(logprobs, list)
        and isinstance(reasoning, str)
    ):
        raise BusProtocolError("a CHUNKS delta map has fields of the wrong type")
    return Piece(text, [_call(c) for c in calls], [_logprob(e) for e in logprobs], reasoning)


def pieces(delta: object) -> list[Piece]:
    """A structured CHUNKS entry (a map, or a list of texts and maps) as pieces."""
    if isinstance(delta, list):
        return [piece(d) for d in delta]
    return [piece(delta)]


def texts_and_calls(items: list[str | Piece]) -> list[str | Piece]:
    """Items in order with runs of text merged into one string, and runs of reasoning
    into one piece, so that a client that lagged gets one delta for what waited, not
    one per token."""
    out: list[str | Piece] = []
    for item in items:
        text, calls = (item, None) if isinstance(item, str) else (item.text, item.calls)
        if not isinstance(item, str) and item.reasoning:
            last = out[-1] if out else None
            if isinstance(last, Piece) and last.reasoning:
                last.reasoning += item.reasoning
            else:
                out.append(Piece(reasoning=item.reasoning))
        if text:
            if out and isinstance(out[-1], str):
                out[-1] += text
            else:
                out.append(text)
        if calls:
            out.append(Piece(calls=calls))
    return out


@dataclass
class Collected:
    """A whole response's output: its text, its reasoning, its calls, and its tokens'
    logprobs."""

    text: list[str] = field(default_factory=list)
    thought: list[str] = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)
    arguments: dict[int, list[str]] = field(default_factory=dict)
    logprobs: list[TokenLogprob] = field(default_factory=list)

    def add(self, item: str | Piece) -> None:
        if isinstance(item, str):
            self.text.append(item)
            return
        self.text.append(item.text)
        if item.reasoning:
            self.thought.append(item.reasoning)
        for call in item.calls:
            if call.name:
                self.names[call.index] = call.name
            self.arguments.setdefault(call.index, []).append(call.arguments)
        self.logprobs.extend(item.logprobs)

    def calls(self) -> list[tuple[str, str]]:
        """(name, arguments) of each call, in order."""
        order = sorted(set(self.names) | set(self.arguments))
        return [(self.names.get(i, ""), "".join(self.arguments.get(i, []))) for i in order]

    def content(self) -> str:
        return "".join(self.text)

    def reasoning(self) -> str:
        return "".join(self.thought)


def chat_logprobs(entries: list[TokenLogprob]) -> dict[str, Any]:
    """OpenAI's chat `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}]}."""
    return {
        "content": [
            {
                "token": e.text,
                "logprob": e.logprob,
                "bytes": list(e.token),
                "top_logprobs": [
                    {"token": t.decode("utf-8", errors="replace"), "logprob": lp, "bytes": list(t)}
                    for t, lp in e.top
                ],
            }
            for e in entries
        ],
        "refusal": None,
    }


def completion_logprobs(entries: list[TokenLogprob], offset: int) -> dict[str, Any]:
    """The legacy completions shape: parallel lists, the top ones as {token: logprob}."""
    tokens, offsets = [], []
    for e in entries:
        tokens.append(e.text)
        offsets.append(offset)
        offset += len(e.text)
    return {
        "tokens": tokens,
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [
            {t.decode("utf-8", errors="replace"): lp for t, lp in e.top} for e in entries
        ],
        "text_offset": offsets,
    }
