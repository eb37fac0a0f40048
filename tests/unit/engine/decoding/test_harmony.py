"""gpt-oss's harmony channels read apart however the text is cut: reasoning, content, calls
addressed either way, a call's look-alike inside reasoning, output that is not harmony's,
and the messages its template is given."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coderai.bus.messages import Job
from coderai.engine.decoding.chat_template import (
    harmony_turns,
    reasoning_format,
    template_input,
    tool_format,
)
from coderai.engine.decoding.harmony import HarmonyReader
from tests.unit.engine.decoding.test_tool_parse import cuts

ARGS = {"city": 'Paris, "FR" <|end|>?', "days": [1, 2]}


def read(pieces: list[str], calls: bool = True, single: bool = False) -> dict[str, Any]:
    reader = HarmonyReader(calls=calls, single=single)
    reasoning = content = ""
    deltas: dict[int, dict[str, str]] = {}
    thinking = []
    for piece in [*pieces, None]:
        out = reader.feed(piece) if piece is not None else reader.finish()
        reasoning, content = reasoning + out.reasoning, content + out.content
        thinking.append(reader.thinking)
        for d in out.calls:
            call = deltas.setdefault(d.index, {"name": "", "arguments": ""})
            call["name"] += d.name
            call["arguments"] += d.arguments
    return {
        "reasoning": reasoning,
        "content": content,
        "calls": [deltas[i] for i in sorted(deltas)],
        "called": reader.called,
        "count": reader.calls,
    }


ANSWER = (
    "<|channel|>analysis<|message|>The user wants the weather.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>"
)


@pytest.mark.parametrize("pieces", cuts(ANSWER))
def test_analysis_is_reasoning_and_final_is_content(pieces: list[str]) -> None:
    got = read(pieces)
    assert (got["reasoning"], got["content"], got["calls"]) == (
        "The user wants the weather.",
        "It is sunny.",
        [],
    )


# the recipient after the channel, as gpt-oss writes it, and the arguments' text with a
# look-alike of an end marker inside a string... which does end the body: harmony has no
# escaping, so the reader ends where the model's own <|end|> would
CALL_AFTER_CHANNEL = (
    "<|channel|>analysis<|message|>Need weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris", "days": [1, 2]}<|call|>'
)
# the recipient in the role part, as the template writes an earlier call
CALL_AFTER_ROLE = (
    "<|channel|>analysis<|message|>Need weather.<|end|>"
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json"
    '<|message|>{"city": "Paris", "days": [1, 2]}'
)


@pytest.mark.parametrize("text", [CALL_AFTER_CHANNEL, CALL_AFTER_ROLE])
@pytest.mark.parametrize("cut", range(3))
def test_a_message_to_a_function_is_a_call_streamed_as_written(text: str, cut: int) -> None:
    got = read(cuts(text)[cut])
    assert got["reasoning"] == "Need weather."
    assert got["content"] == ""
    assert [c["name"] for c in got["calls"]] == ["get_weather"]
    assert json.loads(got["calls"][0]["arguments"]) == {"city": "Paris", "days": [1, 2]}
    assert got["called"] and got["count"] == 1  # its end is the backend's stop, or <|call|>


@given(st.lists(st.integers(min_value=1, max_value=len(CALL_AFTER_CHANNEL) - 1), max_size=12))
def test_any_cut_reads_the_same(points: list[int]) -> None:
    marks = sorted({0, *points, len(CALL_AFTER_CHANNEL)})
    pieces = [CALL_AFTER_CHANNEL[a:b] for a, b in itertools.pairwise(marks)]
    assert read(pieces) == read([CALL_AFTER_CHANNEL])


def test_a_call_written_inside_reasoning_is_reasoning() -> None:
    text = (
        "<|channel|>analysis<|message|>I could write "
        '<tool_call>{"name": "rm"}</tool_call> or to=functions.rm.<|end|>'
        "<|start|>assistant<|channel|>final<|message|>No.<|return|>"
    )
    got = read(list(text))
    assert got["calls"] == [] and not got["called"]
    assert got["reasoning"].endswith("or to=functions.rm.")
    assert got["content"] == "No."


def test_a_preamble_then_two_calls_then_an_answer() -> None:
    text = (
        "<|channel|>commentary<|message|>Looking it up.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.a <|constrain|>json<|message|>{}"
        "<|call|><|start|>assistant<|channel|>commentary to=functions.b<|message|>"
        '{"x": 1}<|call|>'
    )
    got = read([text[i : i + 5] for i in range(0, len(text), 5)])
    assert got["content"] == "Looking it up."
    assert got["calls"] == [
        {"name": "a", "arguments": "{}"},
        {"name": "b", "arguments": '{"x": 1}'},
    ]
    assert got["count"] == 2


def test_parallel_calls_off_stops_reading_after_the_first() -> None:
    text = (
        "<|channel|>commentary to=functions.a<|message|>{}<|call|>"
        "<|start|>assistant<|channel|>commentary to=functions.b<|message|>{}<|call|>"
    )
    got = read(list(text), single=True)
    assert [c["name"] for c in got["calls"]] == ["a"]


def test_without_tools_a_message_to_a_function_is_shown_not_run() -> None:
    got = read([CALL_AFTER_CHANNEL], calls=False)
    assert got["calls"] == [] and not got["called"]
    assert got["content"] == '{"city": "Paris", "days": [1, 2]}'


def test_two_analysis_messages_are_two_paragraphs_of_reasoning() -> None:
    text = (
        "<|channel|>analysis<|message|>First.<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Second.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done."
    )
    got = read(cuts(text)[1])
    assert (got["reasoning"], got["content"]) == ("First.\n\nSecond.", "Done.")


@pytest.mark.parametrize("pieces", cuts("Just text, <|channel|> mentioned."))
def test_output_that_does_not_open_with_a_header_is_all_content(pieces: list[str]) -> None:
    got = read(pieces)
    assert (got["reasoning"], got["content"]) == ("", "Just text, <|channel|> mentioned.")


def test_a_header_cut_off_by_the_end_is_dropped_and_a_body_kept() -> None:
    assert read(["<|channel|>analysis<|message|>Hm.<|end|><|start|>assis"])["reasoning"] == "Hm."
    got = read(["<|channel|>final<|message|>Partly <|re"])
    assert got["content"] == "Partly <|re"  # a marker that never finished is text


def test_reasoning_is_told_apart_while_it_is_written() -> None:
    reader = HarmonyReader()
    reader.feed("<|channel|>analysis<|message|>Thinking")
    assert reader.thinking
    reader.feed("<|end|><|start|>assistant<|channel|>final<|message|>Yes")
    assert not reader.thinking


#: a chat template of gpt-oss's shape, written here: a developer message with the tools,
#: earlier reasoning as `thinking`, one call per assistant message, results named by the
#: call before them, and its refusal of a call message with both content and thinking
HARMONY_TEMPLATE = (
    "{%- set ns = namespace(last='') -%}{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}<|start|>user<|message|>{{ m.content }}<|end|>"
    "{%- elif m.role == 'tool' -%}"
    "<|start|>functions.{{ ns.last }} to=assistant<|channel|>commentary<|message|>"
    "{{ m.content | tojson }}<|end|>"
    "{%- elif m.tool_calls -%}"
    "{%- if m.content and m.thinking -%}{{ raise_exception('Cannot pass both') }}{%- endif -%}"
    "{%- set call = m.tool_calls[0].function -%}{%- set ns.last = call.name -%}"
    "<|start|>assistant to=functions.{{ call.name }}<|channel|>commentary json<|message|>"
    "{{ call.arguments | tojson }}<|call|>"
    "{%- else -%}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if tools %}{% endif %}<|start|>assistant"
)


def test_the_harmony_template_is_known_by_its_channels() -> None:
    assert tool_format(HARMONY_TEMPLATE, {}) == "harmony"
    assert reasoning_format(HARMONY_TEMPLATE, {}) == "harmony"
    assert tool_format(HARMONY_TEMPLATE, {"tool_format": "hermes"}) == "hermes"


def call(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_parallel_calls_become_one_call_per_turn_each_followed_by_its_result() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "Both.",
            "reasoning_content": "Two lookups.",
            "tool_calls": [call("c1", "a"), call("c2", "b")],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
    ]
    turns = harmony_turns(messages)
    shape = [
        (t["role"], [c["id"] for c in t.get("tool_calls", [])], t.get("tool_call_id"))
        for t in turns
    ]
    assert shape == [
        ("user", [], None),
        ("assistant", ["c1"], None),
        ("tool", [], "c1"),
        ("assistant", ["c2"], None),
        ("tool", [], "c2"),
    ]
    # the text joins the reasoning, which the template would write in the same place
    assert turns[1]["thinking"] == "Two lookups.\n\nBoth." and not turns[1]["content"]


def test_the_template_gets_earlier_reasoning_and_calls_it_can_render() -> None:
    job = Job(
        1,
        {},
        "chat",
        messages=[
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": "Both.",
                "reasoning_content": "Hm.",
                "tool_calls": [call("c1", "a"), call("c2", "b")],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
            {"role": "tool", "tool_call_id": "c2", "content": "B"},
        ],
        tools=[{"type": "function", "function": {"name": "a", "parameters": {}}}],
    )
    messages, tools = template_input(job, HARMONY_TEMPLATE)
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment()

    def refuse(text: str) -> None:
        raise ValueError(text)

    rendered = env.from_string(HARMONY_TEMPLATE).render(
        messages=messages, tools=tools, raise_exception=refuse
    )
    assert "to=functions.a<|channel|>commentary json<|message|>{}" in rendered
    assert "to=functions.b<|channel|>commentary json<|message|>{}" in rendered
    # each result follows its own call, named by it
    a_result = rendered.index("<|start|>functions.a to=assistant")
    b_call = rendered.index("to=functions.b<|")
    assert a_result < b_call < rendered.index("<|start|>functions.b to=assistant")


@pytest.mark.parametrize("cut", range(3))
def test_a_first_message_addressed_after_its_role_is_a_call(cut: int) -> None:
    """The prompt ends with `<|start|>assistant`: the output opens with the recipient."""
    text = ' to=functions.ls<|channel|>commentary json<|message|>{"path": "."}<|call|>'
    got = read(cuts(text)[cut])
    assert got["calls"] == [{"name": "ls", "arguments": '{"path": "."}'}] and got["called"]
    assert got["content"] == ""


def test_a_message_to_a_built_in_tool_is_read_by_its_channel() -> None:
    text = (
        "<|channel|>analysis to=browser.search code<|message|>{}<|call|>"
        "<|start|>assistant<|channel|>commentary to=python<|message|>print(1)<|call|>"
    )
    got = read(list(text))
    assert got["calls"] == [] and not got["called"]
    assert (got["reasoning"], got["content"]) == ("{}", "print(1)")


def test_reused_call_ids_keep_each_result_after_its_own_call() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call("call_0", "a")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "R1"},
        {"role": "assistant", "content": "", "tool_calls": [call("call_0", "b")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "R2"},
    ]
    turns = harmony_turns(messages)
    assert [t.get("content") if t["role"] == "tool" else t["role"] for t in turns] == [
        "user", "assistant", "R1", "assistant", "R2"
    ]  # fmt: skip


def test_what_a_reader_holds_at_the_end_reaches_the_client() -> None:
    """At the end of the output (max_tokens, a stop string) a reader gives back what it
    held: reasoning that might have been an end marker, a cut-off call's closing brace."""
    from coderai.engine.backends.base import Sequence
    from coderai.engine.decoding import structured
    from coderai.engine.decoding.tool_parse import ToolCallParser

    seq = Sequence(Job(1, {}, "chat"))
    seq.parser = HarmonyReader()
    got = structured.read(seq, "<|channel|>analysis<|message|>compare a <")
    assert got.reasoning == "compare a "
    assert structured.read(seq, "", end=True).reasoning == "<"

    seq.parser = ToolCallParser("auto", "qwen3_coder")
    text = "<tool_call>\n<function=ls>\n<parameter=path>\n.\n"
    arguments = "".join(d.arguments for d in structured.read(seq, text, end=True).calls)
    assert json.loads(arguments) == {"path": "."}
