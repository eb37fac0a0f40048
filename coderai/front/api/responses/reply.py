"""OpenAI's Responses API answers: the response object, whole or as its stream of typed
events, rendered from one chat job's output.

The output is a `message` item holding the text (one `output_text` part) and a
`function_call` item per tool call, in the order the model wrote them. Item ids and call
ids are made here, as chat completions' call ids are (choices.py).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from coderai.bus.kinds import FinishReason
from coderai.bus.messages import Done, Prompt
from coderai.errors import CoderaiError
from coderai.front.api.event_relay import EventTemplate, render, sse
from coderai.front.api.openai.choices import call_id
from coderai.front.api.responses.reasoning_copy import PLAIN, Shown, seal
from coderai.front.api.responses.request import ResponsesRequest
from coderai.front.api.stream_io import progress_comment
from coderai.front.dispatch.output import CallPiece, Collected, Piece


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def head(req: ResponsesRequest, model: str) -> dict[str, Any]:
    """The response before its output: what it says of its request, as OpenAI's does."""
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "metadata": req.metadata or {},
        "model": model,
        "output": [],
        "parallel_tool_calls": req.parallel_tool_calls,
        "previous_response_id": None,
        "reasoning": req.reasoning_echo(),
        "store": False,
        "temperature": req.temperature,
        "text": req.text.echo() if req.text else {"format": {"type": "text"}},
        "tool_choice": req.tool_choice_echo(),
        "tools": [tool.echo() for tool in req.tools],
        "top_p": req.top_p,
        "truncation": "disabled",
        "usage": None,
        "user": req.user,
    }


def usage(done: Done) -> dict[str, Any]:
    return {
        "input_tokens": done.prompt_tokens,
        # cached tokens are part of input_tokens here (Anthropic counts them apart); this
        # server writes no cache entries that a client pays for
        "input_tokens_details": {"cached_tokens": done.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": done.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": done.reasoning_tokens},
        "total_tokens": done.prompt_tokens + done.completion_tokens,
    }


def finished(start: dict[str, Any], output: list[dict[str, Any]], done: Done) -> dict[str, Any]:
    cut = done.finish_reason == FinishReason.LENGTH
    return {
        **start,
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": output,
        "usage": usage(done),
    }


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": content}  # fmt: skip


def reasoning_item(
    item_id: str, status: str, text: str | None, shown: Shown = PLAIN
) -> dict[str, Any]:
    """A reasoning model's thinking, as its text. A local model writes no summary of it:
    asked for one (`reasoning.summary`), the client gets the thinking itself as the
    summary too, since agents (Codex) show a summary and not the raw text; asked for its
    encrypted content, a copy of it (reasoning_copy.py)."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    summary = [{"type": "summary_text", "text": text}] if shown.summary and text is not None else []
    item: dict[str, Any] = {"type": "reasoning", "id": item_id, "status": status,
                            "summary": summary, "content": content}  # fmt: skip
    if shown.copy:
        item["encrypted_content"] = None if text is None else seal(text)
    return item


#: the model's name of each namespaced function: (namespace, name)
Names = dict[str, tuple[str, str]]


def call_item(name: str, arguments: str, status: str, names: Names) -> dict[str, Any]:
    """A function_call item; a namespaced function's carries its namespace and own name."""
    item = {"type": "function_call", "id": new_id("fc"), "call_id": call_id(), "name": name,
            "arguments": arguments, "status": status}  # fmt: skip
    if name in names:
        item["namespace"], item["name"] = names[name]
    return item


def _text_status(done: Done) -> str:
    return "incomplete" if done.finish_reason == FinishReason.LENGTH else "completed"


def whole(
    start: dict[str, Any], got: Collected, done: Done, names: Names, shown: Shown = PLAIN
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    thought = got.reasoning()
    if thought:
        output.append(reasoning_item(new_id("rs"), "completed", thought, shown))
    text, calls = got.content(), got.calls()
    if text or not calls:
        output.append(message_item(new_id("msg"), _text_status(done), [output_text(text)]))
    output += [call_item(name, arguments, "completed", names) for name, arguments in calls]
    return finished(start, output, done)


class ResponseStream:
    """The events of one streamed response, each with its sequence number:
    response.created and .in_progress; per output item, output_item.added, then for a
    reasoning model's thinking reasoning_text.delta… and .done (and, asked for a summary,
    reasoning_summary_part.added, reasoning_summary_text.delta… and .done and
    reasoning_summary_part.done), for the text content_part.added, output_text.delta…,
    output_text.done and content_part.done, or
    for a call function_call_arguments.delta… and .done, then output_item.done; and
    response.completed (or .incomplete, cut by max_output_tokens)."""

    _TEXT, _SEQ = "\x00coderai-text\x00", "\x00coderai-seq\x00"

    def __init__(self, start: dict[str, Any], names: Names, shown: Shown = PLAIN) -> None:
        self.start = start
        self.names = names
        self.shown = shown
        self.seq = 0
        #: the items done, in order; the open one, what it holds so far, and its call
        self.output: list[dict[str, Any]] = []
        self._item: dict[str, Any] | None = None
        self._held: list[str] = []
        self._call: int | None = None
        self._text_delta: EventTemplate | None = None

    def _event(self, event: dict[str, Any]) -> bytes:
        event["sequence_number"] = self.seq
        self.seq += 1
        return sse(event["type"], event)

    def opening(self, prompt: Prompt | None) -> bytes:
        return self._event({"type": "response.created", "response": self.start}) + self._event(
            {"type": "response.in_progress", "response": self.start}
        )

    def keepalive(self, prompt: Prompt | None) -> bytes:
        return progress_comment(prompt)

    def settling(self) -> bool:
        return False  # nothing of its own to wait for

    def items(self, items: list[str | Piece]) -> bytes:
        return render(items, self._text, self._call_delta, self._thought)

    def _thought(self, text: str) -> bytes:
        out = b""
        if self._item is None or self._item["type"] != "reasoning":
            out += self._open(reasoning_item(new_id("rs"), "in_progress", None))
            if self.shown.summary:
                out += self._event({"type": "response.reasoning_summary_part.added",
                                    **self._where(), "summary_index": 0,
                                    "part": {"type": "summary_text", "text": ""}})  # fmt: skip
        self._held.append(text)
        out += self._event({"type": "response.reasoning_text.delta", **self._where(),
                            "content_index": 0, "delta": text})  # fmt: skip
        if self.shown.summary:
            out += self._event({"type": "response.reasoning_summary_text.delta",
                                **self._where(), "summary_index": 0, "delta": text})  # fmt: skip
        return out

    def _where(self) -> dict[str, Any]:
        assert self._item is not None
        return {"item_id": self._item["id"], "output_index": len(self.output)}

    def _open(self, item: dict[str, Any]) -> bytes:
        out = self._close("completed")
        self._item = item
        return out + self._event(
            {"type": "response.output_item.added", "output_index": len(self.output), "item": item}
        )

    def _text(self, text: str) -> bytes:
        out = b""
        if self._item is None or self._item["type"] != "message" or self._text_delta is None:
            out += self._open(message_item(new_id("msg"), "in_progress", []))
            where = self._where()
            out += self._event({"type": "response.content_part.added", **where,
                                "content_index": 0, "part": output_text("")})  # fmt: skip
            delta = {"type": "response.output_text.delta", **where, "content_index": 0,
                     "delta": self._TEXT, "logprobs": [], "sequence_number": self._SEQ}  # fmt: skip
            self._text_delta = EventTemplate(delta["type"], delta, self._TEXT, self._SEQ)
        self._held.append(text)
        self.seq += 1
        return out + self._text_delta.fill(text, self.seq - 1)

    def _call_delta(self, call: CallPiece) -> bytes:
        out = b""
        if self._item is None or self._item["type"] != "function_call" or self._call != call.index:
            out += self._open(call_item(call.name, "", "in_progress", self.names))
            self._call = call.index
        if call.arguments:
            self._held.append(call.arguments)
            out += self._event({"type": "response.function_call_arguments.delta",
                                **self._where(), "delta": call.arguments})  # fmt: skip
        return out

    def _close(self, status: str) -> bytes:
        """End the open item, if any: its done events, with all it held."""
        if self._item is None:
            return b""
        where, held = self._where(), "".join(self._held)
        if self._item["type"] == "reasoning":
            out = self._event({"type": "response.reasoning_text.done", **where,
                               "content_index": 0, "text": held})  # fmt: skip
            if self.shown.summary:
                part = {"type": "summary_text", "text": held}
                out += self._event({"type": "response.reasoning_summary_text.done", **where,
                                    "summary_index": 0, "text": held})  # fmt: skip
                out += self._event({"type": "response.reasoning_summary_part.done", **where,
                                    "summary_index": 0, "part": part})  # fmt: skip
            item = reasoning_item(self._item["id"], "completed", held, self.shown)
        elif self._item["type"] == "message":
            part = output_text(held)
            out = self._event({"type": "response.output_text.done", **where, "content_index": 0,
                               "text": held, "logprobs": []})  # fmt: skip
            out += self._event({"type": "response.content_part.done", **where,
                                "content_index": 0, "part": part})  # fmt: skip
            item = {**self._item, "status": status, "content": [part]}
        else:
            out = self._event({"type": "response.function_call_arguments.done", **where,
                               "arguments": held})  # fmt: skip
            item = {**self._item, "status": "completed", "arguments": held}
        out += self._event({"type": "response.output_item.done",
                            "output_index": where["output_index"], "item": item})  # fmt: skip
        self.output.append(item)
        self._item, self._held, self._call, self._text_delta = None, [], None, None
        return out

    def closing(self, done: Done) -> bytes:
        out = self._close(_text_status(done))
        response = finished(self.start, self.output, done)
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return out + self._event({"type": kind, "response": response})

    def error(self, error: CoderaiError) -> bytes:
        """After the first byte the status is sent: the response fails, with the reason."""
        failed = {**self.start, "status": "failed", "output": self.output,
                  "error": {"code": "server_error", "message": error.message}}  # fmt: skip
        return self._event({"type": "response.failed", "response": failed})
