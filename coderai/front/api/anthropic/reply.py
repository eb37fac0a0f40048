"""Anthropic's Messages API answers: the whole message, its stream of events, and its
error shape, rendered from one chat job's output.

Tool-use ids are made here, as chat completions' call ids are (choices.py): engines never
deal in wire ids.

A stop sequence ends the turn as `stop_sequence`, naming it (the engine's DONE says which
one matched).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from coderai.bus.kinds import FinishReason
from coderai.bus.messages import Done, Prompt
from coderai.errors import CoderaiError, ContextLengthExceeded
from coderai.front.api.anthropic import server_tools
from coderai.front.api.event_relay import EventTemplate, render, sse
from coderai.front.api.stream_io import progress_comment
from coderai.front.dispatch.output import CallPiece, Collected, Piece
from coderai.front.http import error_response

log = logging.getLogger("coderai.front")
#: what runs a server tool's call: (name, arguments, its block's id) -> its result block
Run = Callable[[str, str, str], Awaitable[dict[str, Any]]]

STOP_REASONS: dict[str, str] = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    # the client is gone; no one reads it
    FinishReason.CANCELLED: "end_turn",
}


def stop_of(done: Done) -> dict[str, Any]:
    """stop_reason and stop_sequence: a matched stop string is Anthropic's stop_sequence."""
    if done.stop_sequence:
        return {"stop_reason": "stop_sequence", "stop_sequence": done.stop_sequence}
    return {"stop_reason": STOP_REASONS.get(done.finish_reason, "end_turn"), "stop_sequence": None}


#: Anthropic's error type for each status this server answers with
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    # no engine can serve now: what Anthropic's 529 says, and clients retry it
    503: "overloaded_error",
}


_PING = sse("ping", {"type": "ping"})


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def tool_use_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:24]}"


def error_body(error: CoderaiError) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(error.status, "api_error" if error.status >= 500 else None)
    message = (
        error.anthropic_message() if isinstance(error, ContextLengthExceeded) else error.message
    )
    return {"type": "error", "error": {"type": kind or "invalid_request_error", "message": message}}


def refuse(error: CoderaiError, engine: str | None = None) -> web.Response:
    """An error answered with a status, in Anthropic's shape."""
    return error_response(error, engine, error_body(error))


def usage(done: Done) -> dict[str, Any]:
    """Anthropic counts tokens read from the cache apart from input_tokens (the prompt is
    their sum)."""
    return {
        "input_tokens": done.prompt_tokens - done.cached_tokens,
        "output_tokens": done.completion_tokens,
        "cache_read_input_tokens": done.cached_tokens,
        # the prefix cache keeps every prompt without being asked, and charges nothing
        "cache_creation_input_tokens": 0,
    }


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object Anthropic's `input` is. Only a call cut short by
    max_tokens has arguments that do not parse; its stop_reason says so, and the SDKs
    need an object."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


#: a thinking block's signature: Anthropic signs its thinking so that a client cannot
#: alter what it sends back; a local server has no one to prove it to, and does not check
#: what comes back, so its blocks carry an empty one (clients keep and resend it as is)
SIGNATURE = ""


def server_calls(got: Collected, server: frozenset[str]) -> list[tuple[str, str, str]]:
    """The answer's calls of server tools: (name, arguments, the id its block gets)."""
    return [(name, arguments, server_tools.server_tool_use_id())
            for name, arguments in got.calls() if name in server]  # fmt: skip


def _paused(stop: dict[str, Any], client_calls: int, server_calls: int) -> dict[str, Any]:
    """A turn that called only server tools pauses (the client sends it back as it is, and
    the model goes on from their results); one that called a client tool waits for it."""
    if server_calls and not client_calls and stop["stop_reason"] == "tool_use":
        return {**stop, "stop_reason": "pause_turn"}
    return stop


def whole(
    msg_id: str,
    model: str,
    got: Collected,
    done: Done,
    server: frozenset[str] = frozenset(),
    results: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The whole message; a server tool's call is followed by its result, in `results`
    (server_calls' order: the route runs them first)."""
    pending = list(results or [])
    content: list[dict[str, Any]] = []
    thought = got.reasoning()
    if thought:
        content.append({"type": "thinking", "thinking": thought, "signature": SIGNATURE})
    text = got.content()
    if text:
        content.append({"type": "text", "text": text})
    client_calls = server_calls = 0
    for name, arguments in got.calls():
        if name in server:
            result = pending.pop(0)
            content.append({"type": "server_tool_use", "id": result["tool_use_id"],
                            "name": name, "input": tool_input(arguments)})  # fmt: skip
            content.append(result)
            server_calls += 1
            continue
        block = {"type": "tool_use", "id": tool_use_id(), "name": name}
        content.append({**block, "input": tool_input(arguments)})
        client_calls += 1
    return {
        "id": msg_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        **_paused(stop_of(done), client_calls, server_calls),
        "usage": usage(done),
    }


class MessageStream:
    """The events of one streamed message: message_start; per content block (a reasoning
    model's thinking, text, or a tool_use whose input arrives as partial JSON)
    content_block_start, its deltas and content_block_stop; message_delta with the stop
    reason and usage; message_stop."""

    _TEXT = "\x00coderai-text\x00"

    def __init__(
        self,
        msg_id: str,
        model: str,
        server: frozenset[str] = frozenset(),
        run: Run | None = None,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self.msg_id = msg_id
        self.model = model
        #: the server tools' names, what runs their calls (server_tools.Runner) and how
        #: the relay is woken when one has run; the calls made, client and server
        self.server = server
        self.run = run
        self.wake = wake
        self.calls = {"client": 0, "server": 0}
        #: each server call: its name, id and arguments, and once run, its task
        self._server_calls: list[tuple[str, str, list[str]]] = []
        self._runs: list[asyncio.Future[dict[str, Any]]] = []
        self._open_server = False
        #: the open block's index and what it holds: ("text", 0) or ("call", call index)
        self._index = -1
        self._block: tuple[str, int] | None = None
        self._text_delta: EventTemplate | None = None

    def opening(self, prompt: Prompt | None) -> bytes:
        """message_start, with the prompt's tokens as the engine counted them when it
        admitted the prompt. Tokens read from the prefix cache are known once the prompt
        is placed, usually after this: message_delta's usage has the final split (the
        SDKs take input_tokens from there too)."""
        tokens, cached = (prompt.tokens, prompt.cached) if prompt is not None else (0, 0)
        message: dict[str, Any] = {
            "id": self.msg_id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": tokens - cached, "output_tokens": 0,
                      "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0},
        }  # fmt: skip
        return sse("message_start", {"type": "message_start", "message": message})

    def keepalive(self, prompt: Prompt | None) -> bytes:
        """Anthropic's own keep-alive, after the progress (a comment its SDK skips)."""
        return progress_comment(prompt) + _PING

    def items(self, items: list[str | Piece]) -> bytes:
        return render(items, self._text, self._call, self._thought)

    def _thought(self, text: str) -> bytes:
        out = b""
        if self._block != ("thinking", 0):
            block = {"type": "thinking", "thinking": "", "signature": SIGNATURE}
            out += self._start(block, ("thinking", 0))
        delta = {"type": "thinking_delta", "thinking": text}
        event = {"type": "content_block_delta", "index": self._index, "delta": delta}
        return out + sse("content_block_delta", event)

    def _text(self, text: str) -> bytes:
        out = b""
        if self._block != ("text", 0) or self._text_delta is None:
            out += self._start({"type": "text", "text": ""}, ("text", 0))
            delta = {"type": "text_delta", "text": self._TEXT}
            event = {"type": "content_block_delta", "index": self._index, "delta": delta}
            self._text_delta = EventTemplate("content_block_delta", event, self._TEXT)
        return out + self._text_delta.fill(text)

    def _call(self, call: CallPiece) -> bytes:
        out = b""
        if self._block != ("call", call.index):
            self._open_server = call.name in self.server
            if self._open_server:
                use_id = server_tools.server_tool_use_id()
                block = {"type": "server_tool_use", "id": use_id, "name": call.name, "input": {}}
                out += self._start(block, ("call", call.index))
                self._server_calls.append((call.name, use_id, []))
                self.calls["server"] += 1
            else:
                block = {"type": "tool_use", "id": tool_use_id(), "name": call.name, "input": {}}
                out += self._start(block, ("call", call.index))
                self.calls["client"] += 1
        if call.arguments and self._open_server:
            self._server_calls[-1][2].append(call.arguments)
        if call.arguments:
            delta = {"type": "input_json_delta", "partial_json": call.arguments}
            event = {"type": "content_block_delta", "index": self._index, "delta": delta}
            out += sse("content_block_delta", event)
        return out

    def _start(self, block: dict[str, Any], holds: tuple[str, int]) -> bytes:
        out = self._stop()
        self._index += 1
        self._block = holds
        event = {"type": "content_block_start", "index": self._index, "content_block": block}
        return out + sse("content_block_start", event)

    def _stop(self) -> bytes:
        if self._block is None:
            return b""
        self._block = None
        return sse("content_block_stop", {"type": "content_block_stop", "index": self._index})

    def settling(self) -> bool:
        """Called once the job has ended: its server calls are run (each wakes the relay
        when it has), and True while any still runs; closing waits for them."""
        if self.run is not None and len(self._runs) < len(self._server_calls):
            for name, use_id, arguments in self._server_calls[len(self._runs) :]:
                task = asyncio.ensure_future(self.run(name, "".join(arguments), use_id))
                task.add_done_callback(self._ran)
                self._runs.append(task)
        return any(not task.done() for task in self._runs)

    def cancel(self) -> None:
        """The client has gone: the server calls still running are dropped."""
        for task in self._runs:
            task.cancel()

    def _ran(self, _task: asyncio.Future[dict[str, Any]]) -> None:
        if self.wake is not None:
            self.wake()

    def _results(self) -> bytes:
        """Each server call's result block, in the order they were made."""
        out = b""
        for i, (name, use_id, _) in enumerate(self._server_calls):
            task = self._runs[i] if i < len(self._runs) else None
            block = server_tools.failed(name, use_id)
            if task is not None and task.done() and not task.cancelled():
                if task.exception() is None:
                    block = task.result()
                else:
                    log.error("a server tool call failed", exc_info=task.exception())
            self._index += 1
            event = {"type": "content_block_start", "index": self._index, "content_block": block}
            out += sse("content_block_start", event)
            out += sse("content_block_stop", {"type": "content_block_stop", "index": self._index})
        return out

    def closing(self, done: Done) -> bytes:
        out = self._stop() + self._results()  # the server calls' results, after them
        delta = _paused(stop_of(done), self.calls["client"], self.calls["server"])
        return (
            out
            + sse("message_delta", {"type": "message_delta", "delta": delta, "usage": usage(done)})
            + sse("message_stop", {"type": "message_stop"})
        )

    def error(self, error: CoderaiError) -> bytes:
        """After the first byte the status is sent: an error is an `error` event."""
        return sse("error", error_body(error))
