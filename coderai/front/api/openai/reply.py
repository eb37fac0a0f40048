"""OpenAI response shapes, streamed and whole.

Streaming is the hot path: each job gets a template whose constant JSON around the
content is encoded once, so an event costs one string escape and two concatenations.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any

from coderai.bus.messages import Done
from coderai.errors import CoderaiError

DONE_EVENT = b"data: [DONE]\n\n"


def dumps(obj: object) -> bytes:
    """Compact UTF-8 JSON, as every event of every API is written."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


def data_event(obj: object) -> bytes:
    """An unnamed SSE event (OpenAI's)."""
    return b"data: " + dumps(obj) + b"\n\n"


def _split(obj: dict[str, Any], marker: str) -> tuple[bytes, bytes]:
    """Encode obj once and cut it around the marker string standing in for the content."""
    encoded = dumps(obj)
    before, after = encoded.split(dumps(marker), 1)
    return b"data: " + before, after + b"\n\n"


class StreamTemplate:
    """The events of one streamed response (chat.completion.chunk or text_completion)."""

    _MARK = "\x00coderai-content\x00"

    def __init__(
        self,
        chat: bool,
        response_id: str,
        created: int,
        model: str,
        include_usage: bool,
        echo: str = "",
    ) -> None:
        self.chat = chat
        #: a completion's prompt, sent back first (the request's echo)
        self.echo = echo
        self._head: dict[str, Any] = {
            "id": response_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }
        self._include_usage = include_usage
        self._prefix, self._suffix = _split(self._event(self._MARK, None), self._MARK)

    def _event(self, content: str | None, finish: str | None) -> dict[str, Any]:
        choice: dict[str, Any]
        if self.chat:
            delta = {} if content is None else {"content": content}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            text = "" if content is None else content
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        event = {**self._head, "choices": [choice]}
        if self._include_usage:
            event["usage"] = None
        return event

    def content(self, text: str) -> bytes:
        return self._prefix + encode_basestring(text).encode() + self._suffix

    def reasoning(self, text: str) -> bytes:
        """A chat event with reasoning, under both names clients read (DeepSeek's
        `reasoning_content`, and `reasoning`)."""
        delta = reasoning_delta(text)
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        event = {**self._head, "choices": [choice]}
        if self._include_usage:
            event["usage"] = None
        return data_event(event)

    def opening(self) -> bytes:
        """Chat streams open with the assistant role, as OpenAI's do; a completion that
        echoes its prompt opens with it."""
        if not self.chat:
            return self.content(self.echo) if self.echo else b""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}}
        event = {**self._head, "choices": [{**choice, "logprobs": None, "finish_reason": None}]}
        if self._include_usage:
            event["usage"] = None
        return data_event(event)

    def closing(self, done: Done) -> bytes:
        out = data_event(self._event(None, done.finish_reason))
        if self._include_usage:
            usage = {**self._head, "choices": [], "usage": usage_of(done)}
            out += data_event(usage)
        return out + DONE_EVENT


def error_event(error: CoderaiError) -> bytes:
    """After the first byte the status is sent; an error travels as an event instead."""
    return data_event(error.envelope())


def usage_of(done: Done) -> dict[str, Any]:
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.completion_tokens,
        "total_tokens": done.prompt_tokens + done.completion_tokens,
        # prompt tokens whose KV state came from the prefix cache, as OpenAI reports them
        "prompt_tokens_details": {"cached_tokens": done.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": done.reasoning_tokens},
    }


def reasoning_delta(reasoning: str) -> dict[str, Any]:
    """A message's or a delta's reasoning, under both names clients read: DeepSeek's
    `reasoning_content` (most agents and SDK helpers), and `reasoning` (OpenRouter's, and
    clients that follow it)."""
    return {"reasoning_content": reasoning, "reasoning": reasoning}


def whole_response(
    chat: bool,
    response_id: str,
    created: int,
    model: str,
    text: str,
    done: Done,
    reasoning: str = "",
) -> dict[str, Any]:
    choice: dict[str, Any]
    if chat:
        # the spec's message carries refusal (null unless the model refused): strict clients
        # and the SDKs' parse() read it
        message = {"role": "assistant", "content": text, "refusal": None}
        if reasoning:
            message.update(reasoning_delta(reasoning))
        choice = {"index": 0, "message": message, "logprobs": None}
    else:
        choice = {"index": 0, "text": text, "logprobs": None}
    choice["finish_reason"] = done.finish_reason
    return {
        "id": response_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage_of(done),
    }
