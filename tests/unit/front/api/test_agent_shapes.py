"""Pure parts of tool calls and structured output: grammars, templates' input, the front's
check of structured deltas, and OpenAI's event shapes for calls."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coderai.bus.messages import Done, Job
from coderai.common import grammar
from coderai.engine.decoding.chat_template import reasoning_switches, template_input, tool_format
from coderai.errors import BusProtocolError, JobError
from coderai.front.api.openai.choices import ChoiceStream, usage
from coderai.front.dispatch.output import CallPiece, Collected, Piece, pieces
from tests.support.sse import one

TOOL = {"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}  # fmt: skip


def test_a_strict_schema_with_an_unimplemented_keyword_is_refused_naming_it() -> None:
    schema = {"type": "object", "if": {"type": "object"}}
    with pytest.raises(grammar.GrammarError, match="if"):
        grammar.check(
            grammar.response_grammar({"type": "json_schema", "schema": schema, "strict": True})
        )
    # not strict: what cannot be enforced is skipped, as OpenAI's non-strict mode promises less
    grammar.check(grammar.response_grammar({"type": "json_schema", "schema": schema}))


def test_grammars_for_each_tool_choice_compile() -> None:
    for text in (
        grammar.required_grammar([TOOL], parallel=False),
        grammar.required_grammar([TOOL, TOOL], parallel=True),
        grammar.named_grammar(TOOL),
        grammar.lazy_grammar([TOOL], "hermes"),
        grammar.lazy_grammar([TOOL], "mistral"),
        grammar.lazy_grammar([TOOL], "llama3"),
        grammar.response_grammar({"type": "json_object"}),
    ):
        grammar.check(text)


@pytest.mark.parametrize(
    ("template", "options", "fmt"),
    [(None, {}, "hermes"), ("{{ tools }}[TOOL_CALLS]", {}, "mistral"),
     ("{% if tools %}<|python_tag|>{% endif %}", {}, "llama3"),
     ("[TOOL_CALLS] but no tool variable", {}, "hermes"),
     (None, {"tool_format": "mistral"}, "mistral")],
)  # fmt: skip
def test_the_call_format_comes_from_the_template_or_the_option(
    template: str | None, options: dict[str, Any], fmt: str
) -> None:
    assert tool_format(template, options) == fmt


def test_an_unknown_tool_format_option_is_a_model_error() -> None:
    with pytest.raises(JobError) as caught:
        tool_format(None, {"tool_format": "xml"})
    assert caught.value.kind == "bad_model"


HISTORY = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
    {"role": "tool", "content": "42", "tool_call_id": "c1"},
]  # fmt: skip


def test_a_template_that_knows_tools_gets_them_with_arguments_as_objects() -> None:
    job = Job(1, {}, "chat", messages=HISTORY, tools=[TOOL], tool_choice="auto")
    messages, tools = template_input(job, "{% for t in tools %}{% endfor %}")
    assert tools == [TOOL]
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert messages[2] == HISTORY[2]


def test_a_template_without_tools_gets_the_fallback_prompt_and_history_as_text() -> None:
    job = Job(1, {}, "chat", messages=HISTORY, tools=[TOOL], tool_choice="auto")
    messages, tools = template_input(job, "{{ messages }}")
    assert tools is None
    assert messages[0]["role"] == "system" and '"name":"f"' in messages[0]["content"]
    call = json.loads(messages[2]["content"].split("<tool_call>")[1].split("</tool_call>")[0])
    assert call == {"name": "f", "arguments": {"a": 1}}
    assert messages[3] == {"role": "user", "content": "<tool_response>\n42\n</tool_response>"}
    # tool_choice none: the tools are not offered
    quiet = Job(1, {}, "chat", messages=HISTORY, tools=[TOOL], tool_choice="none")
    assert template_input(quiet, None)[0][0]["role"] == "user"


@pytest.mark.parametrize(
    "delta",
    [7, {"text": 3}, {"calls": [[0, "f"]]}, {"calls": [[-1, "f", ""]]}, {"calls": [[True, "", ""]]},
     {"calls": [[0, 1, ""]]}, {"logprobs": [[b"a", "x", []]]}, {"logprobs": [[b"a", -1.0, [[1]]]]},
     {"logprobs": [[5, -1.0, []]]}, [{"text": "a"}, None]],
)  # fmt: skip
def test_a_malformed_structured_delta_is_a_protocol_error(delta: Any) -> None:
    with pytest.raises(BusProtocolError):
        pieces(delta)


def test_structured_deltas_collect_into_calls_and_text() -> None:
    got = Collected()
    got.add("a")
    for item in pieces([{"text": "b", "calls": [[0, "f", '{"a"']]}, {"calls": [[0, "", ": 1}"]]}]):
        got.add(item)
    assert got.content() == "ab" and got.calls() == [("f", '{"a": 1}')]


def test_a_streamed_call_gets_its_id_type_and_name_once() -> None:
    stream = ChoiceStream(True, "id", 0, "m", False, 1)
    first = stream.items(0, [Piece(calls=[CallPiece(0, "f", '{"a"')])])
    later = stream.items(0, [Piece(calls=[CallPiece(0, "", ": 1}")])])
    head = one(first).json()["choices"][0]["delta"]["tool_calls"][0]
    tail = one(later).json()["choices"][0]["delta"]["tool_calls"][0]
    assert head["id"].startswith("call_") and head["type"] == "function"
    assert head["function"] == {"name": "f", "arguments": '{"a"'}
    assert tail == {"index": 0, "function": {"arguments": ": 1}"}}
    finish = one(stream.finish(0, Done(1, "cancelled", 1, 1))).json()
    assert finish["choices"][0]["finish_reason"] == "stop", "cancelled is not OpenAI's"


def test_usage_counts_each_prompt_once_and_every_choice() -> None:
    dones = [Done(i, "stop", 10 + i // 2, 3) for i in range(4)]  # 2 prompts x n=2
    assert usage(dones, 2)["prompt_tokens"] == 10 + 11
    assert usage(dones, 2)["completion_tokens"] == 12


NESTED = {
    "type": "function",
    "function": {
        "name": "where",
        "parameters": {
            "type": "object",
            "properties": {"loc": {"$ref": "#/$defs/Loc"}},
            "required": ["loc"],
            "$defs": {
                "Loc": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "near": {"anyOf": [{"$ref": "#/$defs/Loc"}, {"type": "null"}]},
                    },
                    "required": ["city"],
                }
            },
        },
    },
}
OLD_STYLE = {"type": "function", "function": {"name": "g", "parameters": {
    "type": "object", "properties": {"a": {"$ref": "#/definitions/A"}},
    "definitions": {"A": {"type": "integer"}}}}}  # fmt: skip


def test_tools_with_definitions_compile_inside_every_call_grammar() -> None:
    """pydantic puts a tool's models under $defs: nested in a call, its references must
    still resolve (they are moved to the grammar's root under the tool's name)."""
    tools = [NESTED, OLD_STYLE]
    for fmt in ("hermes", "mistral", "llama3"):
        grammar.check(grammar.lazy_grammar(tools, fmt))
    grammar.check(grammar.required_grammar(tools, parallel=True))
    grammar.check(grammar.required_grammar([NESTED], parallel=False))
    assert set(grammar.call_schema(tools)["$defs"]) == {"where.Loc", "g.A"}


def test_a_mistral_template_gets_nine_character_call_ids_that_still_match() -> None:
    job = Job(1, {}, "chat", messages=HISTORY, tools=[TOOL], tool_choice="auto")
    messages, _ = template_input(job, "{{ tools }}[TOOL_CALLS]")
    call_id = messages[1]["tool_calls"][0]["id"]
    assert len(call_id) == 9 and call_id.isalnum() and messages[2]["tool_call_id"] == call_id


def test_the_fallback_puts_parallel_results_in_one_user_turn() -> None:
    results = [{"role": "tool", "content": r, "tool_call_id": f"c{r}"} for r in ("1", "2")]
    job = Job(1, {}, "chat", messages=[*HISTORY[:2], *results], tools=[TOOL], tool_choice="auto")
    messages, _ = template_input(job, None)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[-1]["content"].count("<tool_response>") == 2


QWEN3 = "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}"
GPT_OSS = "Reasoning: {{ reasoning_effort | default('medium') }}"


@pytest.mark.parametrize(
    ("template", "effort", "switches"),
    [(QWEN3, "none", {"enable_thinking": False}), (QWEN3, "high", {"enable_thinking": True}),
     (QWEN3, "", {}), (GPT_OSS, "xhigh", {"reasoning_effort": "high"}),
     # gpt-oss cannot stop reasoning: the least it does
     (GPT_OSS, "none", {"reasoning_effort": "low"}), ("{{ messages }}", "high", {}),
     (None, "low", {})],
)  # fmt: skip
def test_an_effort_reaches_the_templates_own_reasoning_switch_only(
    template: str | None, effort: str, switches: dict[str, Any]
) -> None:
    job = Job(job_id=1, model={}, kind="chat", reasoning_effort=effort)
    assert reasoning_switches(job, template) == switches
