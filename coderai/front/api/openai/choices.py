"""OpenAI responses with several choices, tool calls or logprobs, streamed and whole.

A plain single-choice stream keeps the pre-encoded template of reply.py (the hot path); a
response that needs more goes through here, where each event is built as a dict. Each
choice is one engine job; a tool call gets its id here, on its first delta, so engines
never deal in wire ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from coderai.bus.kinds import FinishReason
from coderai.bus.messages import Done
from coderai.errors import CoderaiError
from coderai.front.api.openai.reply import DONE_EVENT, data_event, reasoning_delta, usage_of
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.output import Collected, Piece, chat_logprobs, completion_logprobs


def call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def finish_reason(done: Done) -> str:
    """A reason from OpenAI's enum: a cancelled job's client is gone, but say stop."""
    return FinishReason.STOP if done.finish_reason == FinishReason.CANCELLED else done.finish_reason


def usage(dones: list[Done], prompts: int) -> dict[str, Any]:
    """Completion tokens of every choice; the prompt counted once per distinct prompt (n
    choices of one prompt read it once, as OpenAI bills it)."""
    each = max(1, len(dones) // max(1, prompts))
    firsts = dones[::each]
    total = Done(
        0,
        "",
        sum(d.prompt_tokens for d in firsts),
        sum(d.completion_tokens for d in dones),
        sum(d.cached_tokens for d in firsts),
        reasoning_tokens=sum(d.reasoning_tokens for d in dones),
    )
    return usage_of(total)


class ChoiceStream:
    """The events of one streamed response with `count` choices."""

    def __init__(
        self,
        chat: bool,
        response_id: str,
        created: int,
        model: str,
        include_usage: bool,
        count: int,
        echoes: list[str] | None = None,
    ) -> None:
        self.chat = chat
        self.head = {
            "id": response_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }
        self.include_usage = include_usage
        self.count = count
        self.echoes = echoes or [""] * count
        self._ids: dict[tuple[int, int], str] = {}
        self._offsets = [len(e) for e in self.echoes]

    def _choice(self, index: int, body: dict[str, Any], finish: str | None) -> bytes:
        choice = {"index": index, **body, "finish_reason": finish}
        event: dict[str, Any] = {**self.head, "choices": [choice]}
        if self.include_usage:
            event["usage"] = None
        return data_event(event)

    def opening(self) -> bytes:
        if self.chat:
            delta = {"delta": {"role": "assistant", "content": ""}, "logprobs": None}
            return b"".join(self._choice(i, delta, None) for i in range(self.count))
        return b"".join(
            self._choice(i, {"text": echo, "logprobs": None}, None)
            for i, echo in enumerate(self.echoes)
            if echo
        )

    def items(self, index: int, items: list[str | Piece]) -> bytes:
        out = b""
        for item in items:
            piece = Piece(text=item) if isinstance(item, str) else item
            out += self._chat_piece(index, piece) if self.chat else self._text_piece(index, piece)
        return out

    def _chat_piece(self, index: int, piece: Piece) -> bytes:
        delta: dict[str, Any] = reasoning_delta(piece.reasoning) if piece.reasoning else {}
        if piece.text:
            delta["content"] = piece.text
        if piece.calls:
            delta["tool_calls"] = [self._call_delta(index, c.index, c.name, c.arguments)
                                   for c in piece.calls]  # fmt: skip
        if not delta and not piece.logprobs:
            return b""
        logprobs = chat_logprobs(piece.logprobs) if piece.logprobs else None
        return self._choice(index, {"delta": delta, "logprobs": logprobs}, None)

    def _call_delta(self, choice: int, call: int, name: str, arguments: str) -> dict[str, Any]:
        out: dict[str, Any] = {"index": call}
        key = (choice, call)
        if key not in self._ids:
            self._ids[key] = call_id()
            out.update(id=self._ids[key], type="function")
            out["function"] = {"name": name, "arguments": arguments}
        else:
            out["function"] = {"arguments": arguments}
        return out

    def _text_piece(self, index: int, piece: Piece) -> bytes:
        if not piece.text and not piece.logprobs:
            return b""
        logprobs = None
        if piece.logprobs:
            logprobs = completion_logprobs(piece.logprobs, self._offsets[index])
        self._offsets[index] += len(piece.text)
        return self._choice(index, {"text": piece.text, "logprobs": logprobs}, None)

    def finish(self, index: int, done: Done) -> bytes:
        body: dict[str, Any] = {"delta": {}} if self.chat else {"text": ""}
        return self._choice(index, {**body, "logprobs": None}, finish_reason(done))

    def advance(
        self,
        jobs: list[FrontJob],
        finished: set[int],
        prompts: int,
        resume: Callable[[FrontJob], None],
    ) -> tuple[bytes, CoderaiError | None, bool]:
        """The events of what the jobs (choice i is jobs[i]) produced since the last call,
        each choice's finish once it ends (`finished` keeps which have), and the usage and
        [DONE] once all have; the first failure, which ends the whole stream instead; and
        whether the stream is over. A held job whose output was taken is resumed."""
        out = b""
        for i, job in enumerate(jobs):
            items = job.take_items()
            if items:
                if job.held:  # its reader caught up with what was held for it
                    resume(job)
                out += self.items(i, items)
            if isinstance(job.outcome, Done) and i not in finished:
                finished.add(i)
                out += self.finish(i, job.outcome)
        failed = next((j.outcome for j in jobs if isinstance(j.outcome, CoderaiError)), None)
        if failed is not None:
            return out, failed, True
        if len(finished) < len(jobs):
            return out, None, False
        dones = [j.outcome for j in jobs if isinstance(j.outcome, Done)]
        return out + self.closing(dones, prompts), None, True

    def closing(self, dones: list[Done], prompts: int) -> bytes:
        out = b""
        if self.include_usage:
            out += data_event({**self.head, "choices": [], "usage": usage(dones, prompts)})
        return out + DONE_EVENT


def whole(
    chat: bool,
    response_id: str,
    created: int,
    model: str,
    collected: list[Collected],
    dones: list[Done],
    prompts: int,
    logprobs: bool,
    echoes: list[str] | None = None,
) -> dict[str, Any]:
    choices = []
    for i, (got, done) in enumerate(zip(collected, dones, strict=True)):
        choice: dict[str, Any] = {"index": i}
        if chat:
            calls = got.calls()
            text = got.content()
            message: dict[str, Any] = {
                "role": "assistant",
                "content": text if text or not calls else None,
                "refusal": None,
            }
            thought = got.reasoning()
            if thought:
                message.update(reasoning_delta(thought))
            if calls:
                message["tool_calls"] = [
                    {"id": call_id(), "type": "function",
                     "function": {"name": name, "arguments": arguments}}
                    for name, arguments in calls
                ]  # fmt: skip
            choice["message"] = message
            choice["logprobs"] = chat_logprobs(got.logprobs) if logprobs else None
        else:
            echo = echoes[i] if echoes else ""
            choice["text"] = echo + got.content()
            choice["logprobs"] = completion_logprobs(got.logprobs, len(echo)) if logprobs else None
        choice["finish_reason"] = finish_reason(done)
        choices.append(choice)
    return {
        "id": response_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage(dones, prompts),
    }
