"""A reasoning model's thinking through `coderai run`, read by the official openai client:
`reasoning_content` and `reasoning` apart from the answer, streamed and whole, on the plain
path and beside tool calls; a call written while thinking is no call. The model is the
fake one, scripted to write what Qwen3 writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.server import Server, openai_client, running

THOUGHT = "The user asks about Paris. I could write <tool_call>{} here, but not yet."
CALL = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
THINKER = f"<think>\n{THOUGHT}\n</think>\n\nIt is sunny in Paris."
CALLER = f"<think>\n{THOUGHT}\n</think>\n\nLet me check.<tool_call>\n{CALL}\n</tool_call>"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def _scripted(name: str, script: str, **options: Any) -> dict[str, Any]:
    options = {"script": script, "script_token_chars": 3, **options}
    return {"id": name, "format": "fake", "options": options}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    models = [
        _scripted("thinker", THINKER, reasoning_format="think"),
        _scripted("caller", CALLER, reasoning_format="think"),
        _scripted("plain", THINKER),  # a model that does not reason: its text as written
    ]
    cache = tmp_path_factory.mktemp("cache")
    with running(tmp_path_factory.mktemp("reasoning"), models, cache) as srv:
        yield srv


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai_client(server) as c:
        yield c


def _ask(client: openai.OpenAI, model: str, **extra: Any) -> Any:
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Weather in Paris?"}], **extra
    )


def _extra(obj: Any, name: str) -> Any:
    """A field the SDK's types do not name (it keeps them as extras)."""
    return (obj.model_extra or {}).get(name)


def _streamed(client: openai.OpenAI, model: str, **extra: Any) -> dict[str, Any]:
    got: dict[str, Any] = {"reasoning_content": "", "reasoning": "", "content": "", "calls": []}
    for chunk in _ask(client, model, stream=True, **extra):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for name in ("reasoning_content", "reasoning"):
            got[name] += _extra(delta, name) or ""
        got["content"] += delta.content or ""
        got["calls"] += [c.function.name for c in delta.tool_calls or [] if c.function.name]
        got["finish"] = chunk.choices[0].finish_reason or got.get("finish")
    return got


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_comes_apart_from_the_answer(client: openai.OpenAI, stream: bool) -> None:
    if stream:
        got = _streamed(client, "thinker")
        reasoning, also, content = got["reasoning_content"], got["reasoning"], got["content"]
    else:
        message = _ask(client, "thinker").choices[0].message
        reasoning = _extra(message, "reasoning_content")
        also, content = _extra(message, "reasoning"), message.content
    assert reasoning == also == THOUGHT + "\n"
    assert content == "It is sunny in Paris."


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_written_while_thinking_is_no_call(client: openai.OpenAI, stream: bool) -> None:
    if stream:
        got = _streamed(client, "caller", tools=TOOLS)
        reasoning, content, names = got["reasoning_content"], got["content"], got["calls"]
        finish = got["finish"]
    else:
        choice = _ask(client, "caller", tools=TOOLS).choices[0]
        reasoning, content = _extra(choice.message, "reasoning_content"), choice.message.content
        names = [c.function.name for c in choice.message.tool_calls or []]
        finish = choice.finish_reason
    assert reasoning == THOUGHT + "\n"
    assert content == "Let me check."
    assert names == ["get_weather"] and finish == "tool_calls"


def test_several_choices_each_think_apart(client: openai.OpenAI) -> None:
    response = _ask(client, "thinker", n=2)
    for choice in response.choices:
        assert _extra(choice.message, "reasoning_content") == THOUGHT + "\n"
        assert choice.message.content == "It is sunny in Paris."


def test_a_model_that_does_not_reason_answers_as_written(client: openai.OpenAI) -> None:
    message = _ask(client, "plain").choices[0].message
    assert message.content == THINKER and _extra(message, "reasoning_content") is None
