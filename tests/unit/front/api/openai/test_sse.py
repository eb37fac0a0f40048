from __future__ import annotations

import pytest

from coderai.bus.messages import Done
from coderai.errors import EngineFailed
from coderai.front.api.openai.reply import DONE_EVENT, StreamTemplate, error_event, whole_response
from tests.support.sse import DONE, event


def events(raw: bytes) -> list[object]:
    """The events of rendered bytes, which must be whole `data:` blocks and nothing else."""
    assert raw.endswith(b"\n\n")
    blocks = raw[:-2].split(b"\n\n")
    assert all(block.startswith(b"data: ") for block in blocks)
    return ["[DONE]" if e is DONE else e for e in map(event, blocks)]


@pytest.mark.parametrize(
    "text", ["plain", 'q"uote', "back\\slash", "new\nline", "東京 ✓", "\x00\t"]
)
def test_content_event_carries_the_exact_text(text: str) -> None:
    template = StreamTemplate(True, "chatcmpl-1", 5, "m", include_usage=False)
    (event,) = events(template.content(text))
    assert event == {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 5,
        "model": "m",
        "choices": [
            {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
        ],
    }


def test_completion_events_use_text_and_the_text_completion_object() -> None:
    template = StreamTemplate(False, "cmpl-1", 5, "m", include_usage=False)
    (event,) = events(template.content("hi"))
    assert isinstance(event, dict)
    assert event["object"] == "text_completion"
    assert event["choices"][0]["text"] == "hi"
    assert template.opening() == b""


def test_chat_opens_with_the_assistant_role() -> None:
    template = StreamTemplate(True, "c", 1, "m", include_usage=False)
    (event,) = events(template.opening())
    assert isinstance(event, dict)
    assert event["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_closing_with_usage_adds_a_usage_chunk_then_done() -> None:
    template = StreamTemplate(True, "c", 1, "m", include_usage=True)
    finish, usage, done = events(template.closing(Done(1, "length", 4, 6)))
    assert isinstance(finish, dict) and isinstance(usage, dict)
    assert finish["choices"][0]["finish_reason"] == "length"
    assert finish["usage"] is None
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 6,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert done == "[DONE]"


def test_closing_without_usage_ends_with_done() -> None:
    template = StreamTemplate(True, "c", 1, "m", include_usage=False)
    raw = template.closing(Done(1, "stop", 1, 1))
    assert raw.endswith(DONE_EVENT)
    assert len(events(raw)) == 2


def test_error_event_is_the_openai_envelope() -> None:
    (event,) = events(error_event(EngineFailed("engine-0 died")))
    assert event == {
        "error": {
            "message": "engine-0 died",
            "type": "server_error",
            "param": None,
            "code": "engine_failed",
        }
    }


def test_whole_chat_response_shape() -> None:
    body = whole_response(True, "c", 1, "m", "hi", Done(1, "stop", 2, 3))
    assert body["object"] == "chat.completion"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert body["usage"]["total_tokens"] == 5
