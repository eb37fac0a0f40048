"""The Messages and Responses APIs' translation into a chat request and their rendering
from a job's output: plain functions over plain data, no server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coderai.bus.messages import Done, Prompt
from coderai.errors import ContextLengthExceeded, EngineFailed, InvalidRequest, ModelNotFound
from coderai.front.api.anthropic import reply as anthropic_reply
from coderai.front.api.anthropic import request as anthropic_request
from coderai.front.api.event_relay import EventTemplate
from coderai.front.api.responses import reply as responses_reply
from coderai.front.api.responses import request as responses_request
from coderai.front.api.translation import chat_request, validate
from coderai.front.dispatch.output import CallPiece, Collected, Piece, texts_and_calls
from tests.support.sse import named_events

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _messages(body: dict[str, Any]) -> anthropic_request.MessagesRequest:
    base = {"model": "m", "max_tokens": 10}
    return validate(
        anthropic_request.MessagesRequest, {**base, **body}, anthropic_request.NOT_BUILT
    )


def _responses(body: dict[str, Any]) -> responses_request.ResponsesRequest:
    return validate(
        responses_request.ResponsesRequest, {"model": "m", **body}, responses_request.NOT_BUILT
    )


# -- Anthropic: requests ---------------------------------------------------------------------


def test_anthropic_blocks_become_chat_messages() -> None:
    req = _messages({
        "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Zürich"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "no such city"}], "is_error": True},
                {"type": "text", "text": "And now?"}]},
        ],
    })  # fmt: skip
    messages = chat_request(req.chat_body(), anthropic_request.RENAMES).messages
    assert [m.for_template() for m in messages] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "toolu_1", "type": "function",
             "function": {"name": "w", "arguments": '{"city": "Zürich"}'}}]},
        {"role": "tool", "content": "Error: no such city", "tool_call_id": "toolu_1"},
        {"role": "user", "content": "And now?"},
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, ("auto", "", True)),
        ({"type": "any", "disable_parallel_tool_use": True}, ("required", "", False)),
        ({"type": "tool", "name": "w"}, ("function", "w", True)),
        ({"type": "none"}, ("none", "", True)),
    ],
)
def test_anthropic_tool_choice_maps_to_openais(
    choice: dict[str, Any], expected: tuple[str, str, bool]
) -> None:
    req = _messages({
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "w", "description": "weather", "input_schema": SCHEMA}],
        "tool_choice": choice,
    })  # fmt: skip
    fields = chat_request(req.chat_body(), anthropic_request.RENAMES).tool_fields()
    assert (fields["tool_choice"], fields["tool_name"], fields["parallel_tool_calls"]) == expected
    assert fields["tools"][0]["function"]["parameters"] == SCHEMA


def test_anthropic_output_format_is_a_json_schema_constraint() -> None:
    req = _messages({
        "messages": [{"role": "user", "content": "hi"}],
        "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
    })  # fmt: skip
    fields = chat_request(req.chat_body(), anthropic_request.RENAMES).tool_fields()
    assert fields["response_format"] == {"type": "json_schema", "schema": SCHEMA, "strict": True}


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"messages": [{"role": "assistant", "content": [{"type": "image", "source": {
            "type": "url", "url": "https://x.org/a.png"}}]}, {"role": "user", "content": "a"}]},
         "messages", "belong in user messages"),
        ({"messages": [{"role": "user", "content": [{"type": "document", "source": {
            "type": "text", "data": "x"}, "citations": {"enabled": True}}]}]},
         "messages", "citations"),
        ({"messages": [{"role": "user", "content": [{"type": "thinking", "thinking": "x"}]}]},
         "messages", "assistant messages"),
        ({"messages": [{"role": "user", "content": [{"type": "mcp_tool_use", "id": "x"}]}]},
         "messages[0].content[0]", "'mcp_tool_use' block"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
         "messages", "prefill"),
        ({"messages": [{"role": "user", "content": "a"}],
          "thinking": {"type": "enabled"}}, "thinking", "budget_tokens"),
        ({"messages": [{"role": "user", "content": "a"}],
          "thinking": {"type": "enabled", "budget_tokens": 500}}, "thinking", "1024"),
        ({"messages": [{"role": "user", "content": "a"}],
          "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking", "max_tokens"),
        ({"messages": [{"role": "user", "content": "a"}],
          "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
         "context_management", "clear_thinking"),
        ({"messages": [{"role": "user", "content": "a"}], "temperature": 1.5},
         "temperature", "temperature"),
        ({"messages": [{"role": "user", "content": "a"}],
          "tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools", "server tools"),
        ({"messages": [{"role": "user", "content": [
            {"type": "tool_use", "id": "t", "name": "w", "input": {}}]}]},
         "messages", "assistant messages"),
        ({"messages": [{"role": "user", "content": "a"}],
          "output_config": {"effort": "extreme"}}, "output_config", "effort"),
    ],
)  # fmt: skip
def test_anthropic_refusals_name_what_and_where(
    body: dict[str, Any], param: str, says: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        _messages(body)
    assert refused.value.param == param and says in refused.value.message


def test_a_chat_check_names_anthropics_parameter() -> None:
    req = _messages({
        "messages": [{"role": "user", "content": "a"}],
        "output_config": {"format": {"type": "json_schema",
                                     "schema": {"type": "object", "if": {"type": "object"}}}},
    })  # fmt: skip
    with pytest.raises(InvalidRequest) as refused:
        chat_request(req.chat_body(), anthropic_request.RENAMES)
    assert refused.value.param == "output_config.format"
    assert refused.value.message.startswith("output_config.format:")


def test_more_stop_sequences_than_chat_completions_allow_are_taken() -> None:
    req = _messages({"messages": [{"role": "user", "content": "a"}],
                     "stop_sequences": [f"s{i}" for i in range(8)]})  # fmt: skip
    assert len(req.stop_sequences) == 8


# -- Anthropic: answers ----------------------------------------------------------------------


def test_anthropic_usage_counts_cached_tokens_apart() -> None:
    usage = anthropic_reply.usage(Done(1, "stop", 100, 7, cached_tokens=60))
    assert usage == {"input_tokens": 40, "output_tokens": 7, "cache_read_input_tokens": 60,
                     "cache_creation_input_tokens": 0}  # fmt: skip


def test_a_whole_message_has_text_then_tool_uses() -> None:
    got = Collected()
    got.add("Checking.")
    got.add(Piece(calls=[CallPiece(0, "w", '{"city": ')]))
    got.add(Piece(calls=[CallPiece(0, "", '"Rome"}')]))
    body = anthropic_reply.whole("msg_1", "m", got, Done(1, "tool_calls", 5, 9))
    text, call = body["content"]
    assert text == {"type": "text", "text": "Checking."}
    assert call["type"] == "tool_use" and call["id"].startswith("toolu_")
    assert call["name"] == "w" and call["input"] == {"city": "Rome"}
    assert body["stop_reason"] == "tool_use" and body["stop_sequence"] is None


def test_a_call_cut_by_max_tokens_has_an_empty_input() -> None:
    assert anthropic_reply.tool_input('{"city": "Ro') == {}


def test_a_message_stream_opens_and_closes_each_block() -> None:
    stream = anthropic_reply.MessageStream("msg_1", "m")
    raw = stream.opening(Prompt(1, tokens=10, read=0, cached=0))
    raw += stream.items(["Let ", 'me "see"', Piece(calls=[CallPiece(0, "w", '{"a"')])])
    raw += stream.items([Piece(calls=[CallPiece(0, "", ": 1}"), CallPiece(1, "t", "{}")])])
    raw += stream.closing(Done(1, "tool_calls", 10, 4))
    events = named_events(raw)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert all(data["type"] == name for name, data in events)
    # text merged into one delta; block indexes count up; each call's JSON arrives whole
    assert events[2][1] == {"type": "content_block_delta", "index": 0,
                            "delta": {"type": "text_delta", "text": 'Let me "see"'}}  # fmt: skip
    assert [events[i][1]["index"] for i in (4, 5, 7, 8, 10)] == [1, 1, 1, 2, 2]
    partial = "".join(e["delta"]["partial_json"] for _, e in events[5:7])
    assert json.loads(partial) == {"a": 1}
    assert events[11][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[11][1]["usage"]["input_tokens"] == 10


def test_anthropic_errors_have_its_shape_and_types() -> None:
    body = anthropic_reply.error_body(ModelNotFound("no model 'x'"))
    assert body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "no model 'x'"},
    }
    assert anthropic_reply.error_body(EngineFailed("gone"))["error"]["type"] == "overloaded_error"
    stream = anthropic_reply.MessageStream("msg_1", "m")
    assert named_events(stream.error(EngineFailed("gone")))[0][0] == "error"


# -- Responses: requests ---------------------------------------------------------------------


def test_response_items_become_chat_messages() -> None:
    req = _responses({
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "t", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "c2",
             "output": [{"type": "input_text", "text": "noon"}]},
        ],
    })  # fmt: skip
    messages = chat_request(req.chat_body(), responses_request.RENAMES).messages
    shapes = [m.for_template() for m in messages]
    assert shapes[0] == {"role": "system", "content": "Be brief."}
    assert shapes[2]["content"] == "Checking."
    assert [c["id"] for c in shapes[2]["tool_calls"]] == ["c1", "c2"]
    assert shapes[3:] == [
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        {"role": "tool", "content": "noon", "tool_call_id": "c2"},
    ]


def test_response_tools_and_format_map_to_chats() -> None:
    req = _responses({
        "input": "hi",
        "tools": [{"type": "function", "name": "w", "parameters": SCHEMA, "strict": True}],
        "tool_choice": {"type": "function", "name": "w"},
        "parallel_tool_calls": False,
    })  # fmt: skip
    fields = chat_request(req.chat_body(), responses_request.RENAMES).tool_fields()
    assert (fields["tool_choice"], fields["tool_name"], fields["parallel_tool_calls"]) == (
        "function", "w", False,
    )  # fmt: skip
    fmt = {"type": "json_schema", "name": "x", "schema": SCHEMA, "strict": True}
    req = _responses({"input": "hi", "text": {"format": fmt}})
    fields = chat_request(req.chat_body(), responses_request.RENAMES).tool_fields()
    assert fields["response_format"] == {"type": "json_schema", "schema": SCHEMA, "strict": True}


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "stored responses"),
        ({"store": True}, "store", "store"),
        ({"include": ["message.output_text.logprobs"]}, "include", "include"),
        ({"reasoning": {"effort": "extreme"}}, "reasoning", "effort"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "detail": "low"}]}]},
         "input", "image_url or file_id"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]", "'item_reference'"),
        ({"tools": [{"name": "no_type"}]}, "tools", "type"),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice", "function tools only"),
    ],
)  # fmt: skip
def test_responses_refusals_name_what_and_where(
    body: dict[str, Any], param: str, says: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        _responses({"input": "hi", **body})
    assert refused.value.param == param and says in refused.value.message


# -- Responses: answers ----------------------------------------------------------------------


def test_a_whole_response_cut_by_the_limit_is_incomplete() -> None:
    got = Collected()
    got.add("Some text")
    start = responses_reply.head(_responses({"input": "hi"}), "m")
    body = responses_reply.whole(start, got, Done(1, "length", 3, 4), {})
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"
    assert body["usage"]["total_tokens"] == 7


def test_a_response_stream_numbers_its_events_and_ends_each_item() -> None:
    start = responses_reply.head(_responses({"input": "hi"}), "m")
    stream = responses_reply.ResponseStream(start, {})
    raw = stream.opening(None) + stream.items(
        ["Hi", " there", Piece(calls=[CallPiece(0, "w", "{")])]
    )
    raw += stream.items([Piece(calls=[CallPiece(0, "", "}")])])
    raw += stream.closing(Done(1, "tool_calls", 3, 4))
    events = named_events(raw)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(name == data["type"] for name, data in events)
    final = events[-1][1]["response"]
    assert events[-1][0] == "response.completed" and final["status"] == "completed"
    message, call = final["output"]
    assert message["content"][0]["text"] == "Hi there" and message["status"] == "completed"
    assert call["arguments"] == "{}" and call["call_id"].startswith("call_")
    added = [data["item"]["id"] for name, data in events if name == "response.output_item.added"]
    assert added == [message["id"], call["id"]]


# -- shared ----------------------------------------------------------------------------------


def test_an_event_template_fills_text_and_numbers() -> None:
    template = EventTemplate(
        "e", {"a": "\x00t\x00", "n": "\x00n\x00", "z": 1}, "\x00t\x00", "\x00n\x00"
    )
    name, data = named_events(template.fill('quote " and \n é', 7))[0]
    assert name == "e" and data == {"a": 'quote " and \n é', "n": 7, "z": 1}


def test_runs_of_text_merge_and_calls_keep_their_place() -> None:
    call = CallPiece(0, "w", "{}")
    items: list[str | Piece] = ["a", Piece(text="b"), Piece(text="c", calls=[call]), "d"]
    assert texts_and_calls(items) == ["abc", Piece(calls=[call]), "d"]


# -- what coding agents send by default ------------------------------------------------------

#: the fields Claude Code sends on every request (FACTS.md), none of which asks anything of
#: a model that does not reason
CLAUDE_CODE = {
    "thinking": {"type": "adaptive", "display": "updates"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "medium"},
    "metadata": {"user_id": "user_abc_account__session_1"},
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=9f2c1;"},
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}},
    ],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "List the files."}]},
        {"role": "system", "content": "<env>cwd: /tmp</env>"},
    ],
}


def test_claude_codes_default_request_is_read_and_its_billing_nonce_dropped() -> None:
    req = _messages(CLAUDE_CODE)
    chat = chat_request(req.chat_body(), anthropic_request.RENAMES)
    assert [m.for_template() for m in chat.messages] == [
        {"role": "system", "content": "You are Claude Code.Be careful."},
        {"role": "user", "content": "List the files.<env>cwd: /tmp</env>"},
    ]
    assert chat.reasoning_effort == "medium"


def test_a_system_message_joins_the_next_user_turn_when_none_is_before_it() -> None:
    req = _messages({"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Note. "}]},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "system", "content": "Late note."},
        {"role": "user", "content": "Bye"},
    ]})  # fmt: skip
    chat = chat_request(req.chat_body(), anthropic_request.RENAMES)
    assert [(m.role, m.text()) for m in chat.messages] == [
        ("user", "Note. Hi"), ("assistant", "Hello"), ("user", "Late note.Bye"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "effort"),
    [({}, None), ({"thinking": {"type": "disabled"}}, "none"),
     ({"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096}, None),
     ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}, "high")],
)  # fmt: skip
def test_thinking_and_effort_reach_the_templates_switch(
    fields: dict[str, Any], effort: str | None
) -> None:
    req = _messages({"messages": [{"role": "user", "content": "a"}], **fields})
    assert chat_request(req.chat_body(), anthropic_request.RENAMES).reasoning_effort == effort


def test_earlier_thinking_blocks_are_their_turns_reasoning_for_the_template() -> None:
    """A thinking block's text goes to the template with its turn (which places it or
    drops it); a redacted one carries nothing readable."""
    req = _messages({"messages": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "b"}]},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"},
                                          {"type": "text", "text": "d"}]},
        {"role": "user", "content": "e"},
    ]})  # fmt: skip
    chat = chat_request(req.chat_body(), anthropic_request.RENAMES)
    assert [m.text() for m in chat.messages] == ["a", "b", "c", "d", "e"]
    sent = [m.for_template().get("reasoning_content") for m in chat.messages]
    assert sent == [None, "hmm", None, None, None]


def test_earlier_reasoning_items_are_the_next_turns_reasoning_for_the_template() -> None:
    """Codex sends a turn's reasoning item before its message or call: its text goes with
    that assistant turn; a summary is not the thinking."""
    req = _responses({"input": [
        {"type": "message", "role": "user", "content": "a"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}],
         "content": [{"type": "reasoning_text", "text": "hmm"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only a summary"}]},
        {"type": "message", "role": "assistant", "content": "b"},
        {"type": "message", "role": "user", "content": "c"},
    ]})  # fmt: skip
    chat = chat_request(req.chat_body(), responses_request.RENAMES)
    sent = [(m.role, m.for_template().get("reasoning_content")) for m in chat.messages]
    assert sent == [
        ("user", None), ("assistant", "hmm"), ("tool", None), ("assistant", None), ("user", None)
    ]  # fmt: skip


def test_a_reasoning_items_copy_carries_its_thinking_back_without_its_text() -> None:
    """Asked for with include, the copy in encrypted_content is ours to read back (a client
    may send only it); a copy not ours (one OpenAI encrypted) is left out."""
    from coderai.front.api.responses.reasoning_copy import Shown, seal

    item = responses_reply.reasoning_item("rs_1", "completed", "hmm", Shown(copy=True))
    assert item["encrypted_content"] == seal("hmm") != "hmm"
    assert "encrypted_content" not in responses_reply.reasoning_item("rs_1", "completed", "hmm")
    req = _responses({"input": [
        {"type": "message", "role": "user", "content": "a"},
        {"type": "reasoning", "summary": [], "encrypted_content": item["encrypted_content"]},
        {"type": "message", "role": "assistant", "content": "b"},
        {"type": "message", "role": "user", "content": "c"},
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAABo-openai-sealed"},
        {"type": "message", "role": "assistant", "content": "d"},
    ]})  # fmt: skip
    chat = chat_request(req.chat_body(), responses_request.RENAMES)
    sent = [m.for_template().get("reasoning_content") for m in chat.messages]
    assert sent == [None, "hmm", None, None]


@pytest.mark.parametrize("name", ["reasoning_content", "reasoning"])
def test_a_chat_turns_reasoning_under_either_name_reaches_the_template(name: str) -> None:
    turns = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", name: "hmm"},
        {"role": "user", "content": "c"},
    ]
    chat = chat_request({"model": "m", "messages": turns}, [])
    assert chat.messages[1].for_template()["reasoning_content"] == "hmm"
    wrong = {"model": "m", "messages": [{"role": "user", "content": "a", name: "hmm"}]}
    with pytest.raises(InvalidRequest, match="only an assistant message has reasoning_content"):
        chat_request(wrong, [])


def test_message_start_carries_the_admitted_prompts_tokens() -> None:
    stream = anthropic_reply.MessageStream("msg_1", "m")
    ((name, event),) = named_events(stream.opening(Prompt(1, tokens=2048, read=0, cached=512)))
    assert name == "message_start"
    usage = event["message"]["usage"]
    assert usage["input_tokens"] == 1536 and usage["cache_read_input_tokens"] == 512


def test_the_anthropic_context_overflow_uses_anthropics_wording() -> None:
    error = ContextLengthExceeded(ContextLengthExceeded.wording(8192, 21037, "messages"))
    assert error.counts() == (21037, 8192)
    body = anthropic_reply.error_body(error)
    assert body["error"] == {
        "type": "invalid_request_error",
        "message": "prompt is too long: 21037 tokens > 8192 maximum",
    }


#: the fields Codex sends on every request (FACTS.md)
CODEX_TOOLS = [
    {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}},
    {"type": "web_search"},
    {"type": "namespace", "name": "mcp", "description": "an MCP server's tools", "tools": [
        {"type": "function", "name": "lookup", "parameters": {"type": "object"}},
        {"type": "image_generation"}]},
]  # fmt: skip


@pytest.mark.parametrize(
    "reasoning", [{}, {"effort": "none"}, {"summary": "auto"}, {"effort": "low", "summary": "auto"}]
)
def test_codex_reasoning_and_include_ask_nothing_of_a_model_that_does_not_reason(
    reasoning: dict[str, Any],
) -> None:
    req = _responses({"input": "hi", "reasoning": reasoning, "store": False,
                      "include": ["reasoning.encrypted_content"]})  # fmt: skip
    chat = chat_request(req.chat_body(), responses_request.RENAMES)
    assert chat.reasoning_effort == reasoning.get("effort")
    start = responses_reply.head(req, "m")
    assert start["reasoning"] == {"effort": reasoning.get("effort"),
                                  "summary": reasoning.get("summary")}  # fmt: skip


def test_function_tools_are_offered_and_hosted_ones_named_as_left_out() -> None:
    req = _responses({"input": "hi", "tools": CODEX_TOOLS})
    fields = chat_request(req.chat_body(), responses_request.RENAMES).tool_fields()
    assert [t["function"]["name"] for t in fields["tools"]] == ["shell", "mcp__lookup"]
    assert req.omitted() == ["web_search", "mcp__image_generation"]
    assert req.namespaces() == {"mcp__lookup": ("mcp", "lookup")}


def test_a_namespaced_call_is_answered_with_its_namespace_and_read_back() -> None:
    req = _responses({"input": "hi", "tools": CODEX_TOOLS})
    got = Collected()
    got.add(Piece(calls=[CallPiece(0, "mcp__lookup", "{}")]))
    start = responses_reply.head(req, "m")
    (item,) = responses_reply.whole(start, got, Done(1, "tool_calls", 3, 4), req.namespaces())[
        "output"
    ]
    assert (item["namespace"], item["name"]) == ("mcp", "lookup")
    # sent back with the conversation, it is the same call to the model
    again = _responses({"tools": CODEX_TOOLS, "input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "namespace": "mcp",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "found"}]})  # fmt: skip
    messages = chat_request(again.chat_body(), responses_request.RENAMES).messages
    assert messages[1].for_template()["tool_calls"][0]["function"]["name"] == "mcp__lookup"


def test_runs_of_reasoning_merge_as_runs_of_text_do() -> None:
    """What waited for a lagging client leaves as one event per run, on every API's
    stream (the plain chat path's too: text_relay.TextStream.items)."""
    items: list[str | Piece] = [
        Piece(reasoning="th"), Piece(reasoning="ink"), Piece(text="a", reasoning="!"), "b"
    ]  # fmt: skip
    assert texts_and_calls(items) == [Piece(reasoning="think!"), "ab"]


def test_server_tools_are_offered_as_functions_and_their_blocks_read_back() -> None:
    error = {"type": "web_search_tool_result_error", "error_code": "unavailable"}
    turn = [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
         "input": {"query": "q"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": error},
    ]  # fmt: skip
    req = _messages({"tools": [{"type": "web_search_20250305", "name": "web_search"}],
                     "messages": [{"role": "user", "content": "a"},
                                  {"role": "assistant", "content": turn}]})  # fmt: skip
    body: dict[str, Any] = req.chat_body()
    assert body["tools"][0]["function"]["name"] == "web_search"
    call, result = body["messages"][1], body["messages"][2]
    assert call["tool_calls"][0]["function"]["arguments"] == '{"query": "q"}'
    assert result["role"] == "tool" and "no search backend" in result["content"]
    with pytest.raises(InvalidRequest) as refused:  # a type's name is its own
        _messages({"messages": [{"role": "user", "content": "a"}],
                   "tools": [{"type": "web_fetch_20250910", "name": "web_search"}]})  # fmt: skip
    assert refused.value.param == "tools"
