"""Compaction for the Responses API: when an agent's conversation fills the window, the
model writes a summary of it, and the agent goes on from the summary.

Two ways in, one job (a chat job over the conversation, then SUMMARY_PROMPT, tools not
callable):
- Codex's (its remote compaction v2, used when its provider is OpenAI's, as it is when
  `openai_base_url` points at this server): a /v1/responses request whose last input item
  is `{"type": "compaction_trigger"}`, answered with exactly one output item,
  `{"type": "compaction", "encrypted_content": ...}`, streamed or whole;
- `POST /v1/responses/compact` (OpenAI's compact endpoint, which Ollama also serves): a
  `response.compaction` object whose output is the user's latest messages, as far as
  RETAINED_CHARS allows, then the compaction item.
The summary travels in `encrypted_content` as reasoning copies do (reasoning_copy.py:
base64 under our prefix, not encrypted); sent back in a later request's input, the model
reads it as a user message (request.CompactionItem). The model's thinking while it
summarises is not part of the summary."""

from __future__ import annotations

import time
from typing import Any

from coderai.bus.messages import Done
from coderai.front.api.responses.reasoning_copy import COMPACTION_PREFIX, seal
from coderai.front.api.responses.reply import ResponseStream, finished, new_id, usage
from coderai.front.api.responses.request import MessageItem, ResponsesRequest
from coderai.front.dispatch.output import Collected, Piece

#: how much of the user's own messages a /v1/responses/compact answer keeps, newest first
#: (in characters: a quarter of a 32k-token window, roughly)
RETAINED_CHARS = 32_000


#: the summary of a compaction whose model wrote none (its thinking took its budget): the
#: session goes on without the history, as after a client's own truncation
NO_SUMMARY = "(The conversation before this point was compacted; no summary of it was written.)"


def compaction_item(summary: str) -> dict[str, Any]:
    sealed = seal(summary.strip() or NO_SUMMARY, COMPACTION_PREFIX)
    return {"type": "compaction", "id": new_id("cmp"), "encrypted_content": sealed}


def whole(start: dict[str, Any], got: Collected, done: Done) -> dict[str, Any]:
    """The compaction turn answered whole: its one item."""
    return finished(start, [compaction_item(got.content())], done)


class CompactionStream(ResponseStream):
    """The compaction turn streamed: response.created and .in_progress at once (keepalive
    comments while the summary is written), then the compaction item's output_item.added
    and .done, and response.completed. The summary is sent whole, in the item."""

    def __init__(self, start: dict[str, Any]) -> None:
        super().__init__(start, {})
        self.text: list[str] = []

    def items(self, items: list[str | Piece]) -> bytes:
        for item in items:  # the text alone: thinking and calls are no part of the summary
            if isinstance(item, str):
                self.text.append(item)
            elif item.text:
                self.text.append(item.text)
        return b""

    def closing(self, done: Done) -> bytes:
        item = compaction_item("".join(self.text))
        out = self._event({"type": "response.output_item.added", "output_index": 0,
                           "item": item})  # fmt: skip
        out += self._event({"type": "response.output_item.done", "output_index": 0, "item": item})
        response = {**finished(self.start, [item], done), "status": "completed"}
        return out + self._event({"type": "response.completed", "response": response})


def retained(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The user's own messages to keep beside the summary, newest first as far as
    RETAINED_CHARS allows, in their order."""
    assert not isinstance(req.input, str)  # the route made a string input a message
    kept: list[dict[str, Any]] = []
    room = RETAINED_CHARS
    for item in reversed(req.input):
        if not (isinstance(item, MessageItem) and item.role == "user"):
            continue
        content = (
            item.content
            if isinstance(item.content, str)
            else item.model_dump(exclude_none=True)["content"]
        )
        size = len(content) if isinstance(content, str) else len(str(content))
        if size > room:
            break
        room -= size
        kept.append({"type": "message", "id": new_id("msg"), "status": "completed",
                     "role": "user", "content": _input_parts(content)})  # fmt: skip
    return kept[::-1]


def _input_parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    return content


def compacted(req: ResponsesRequest, got: Collected, done: Done) -> dict[str, Any]:
    """/v1/responses/compact's answer: a response.compaction object."""
    return {
        "id": new_id("resp"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*retained(req), compaction_item(got.content())],
        "usage": usage(done),
    }
