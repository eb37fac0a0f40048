"""Qwen3-Coder's XML tool calls: names, parameters typed by the tool's schema, however the
text is cut; and the format found in a chat template."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coderai.engine.decoding.chat_template import tool_format
from coderai.engine.decoding.tool_parse import ToolCallParser
from coderai.engine.decoding.xml_call import typed
from tests.unit.engine.decoding.test_tool_parse import cuts, run

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "edit",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "line": {"type": "integer"},
                    "dry": {"type": "boolean"},
                    "changes": {"type": "array"},
                    "limit": {"anyOf": [{"type": "number"}, {"type": "null"}]},
                },
            },
        },
    }
]


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


EDIT = call(
    "edit",
    path='src/a "b".py',
    line="12",
    dry="false",
    changes='[{"old": "x", "new": "y\\n"}]',
    limit="null",
    note="def f():\n    return {1: 2}",
)
EDIT_ARGS = {
    "path": 'src/a "b".py',
    "line": 12,
    "dry": False,
    "changes": [{"old": "x", "new": "y\n"}],
    "limit": None,
    "note": "def f():\n    return {1: 2}",  # a key no schema names: not JSON, so text
}


@pytest.mark.parametrize("pieces", cuts("I will edit it.\n" + EDIT + "\n" + call("edit")))
def test_calls_are_read_with_values_typed_by_the_schema(pieces: list[str]) -> None:
    parser = ToolCallParser("auto", "qwen3_coder", tools=TOOLS)
    content, calls = run(parser, pieces)
    assert content == "I will edit it.\n"
    assert [c["name"] for c in calls] == ["edit", "edit"]
    assert json.loads(calls[0]["arguments"]) == EDIT_ARGS
    assert json.loads(calls[1]["arguments"]) == {}  # a call without parameters
    assert parser.called and parser.calls == 2


@given(st.lists(st.integers(min_value=1, max_value=len(EDIT)), max_size=12))
def test_any_cut_gives_the_same_call(points: list[int]) -> None:
    marks = sorted({0, *points, len(EDIT)})
    pieces = [EDIT[a:b] for a, b in itertools.pairwise(marks)]
    content, calls = run(ToolCallParser("auto", "qwen3_coder", tools=TOOLS), pieces)
    assert content == "" and len(calls) == 1
    assert json.loads(calls[0]["arguments"]) == EDIT_ARGS


def test_a_string_parameter_that_looks_like_a_number_stays_a_string() -> None:
    _, calls = run(ToolCallParser("auto", "qwen3_coder", tools=TOOLS), [call("edit", path="42")])
    assert json.loads(calls[0]["arguments"]) == {"path": "42"}


def test_a_value_that_is_not_its_type_is_kept_as_written() -> None:
    """The client's validation names it; a guess would hide it."""
    _, calls = run(ToolCallParser("auto", "qwen3_coder", tools=TOOLS), [call("edit", line="ten")])
    assert json.loads(calls[0]["arguments"]) == {"line": "ten"}


def test_a_json_body_in_the_same_tags_is_read_as_hermes_writes_it() -> None:
    body = '<tool_call>\n{"name": "edit", "arguments": {"line": 3}}\n</tool_call>'
    content, calls = run(ToolCallParser("auto", "qwen3_coder", tools=TOOLS), cuts(body)[1])
    assert content == "" and [c["name"] for c in calls] == ["edit"]
    assert json.loads(calls[0]["arguments"]) == {"line": 3}


def test_parallel_tool_calls_false_reads_the_first_call_only() -> None:
    parser = ToolCallParser("auto", "qwen3_coder", single=True, tools=TOOLS)
    _, calls = run(parser, [call("edit", line="1") + call("edit", line="2")])
    assert [json.loads(c["arguments"]) for c in calls] == [{"line": 1}]
    assert parser.done


@pytest.mark.parametrize(("after", "content"), [("oops", "oops"), ("</tool_call>", "")])
def test_text_between_parameters_ends_the_call_and_is_read_after_it(
    after: str, content: str
) -> None:
    """`</function>` left out: the call ends with what it had; the text that ended it is
    what follows the call (its closing tag, or content), not lost."""
    text = f"<tool_call>\n<function=edit>\n<parameter=line>\n5\n</parameter>\n{after}"
    for pieces in cuts(text):
        got, calls = run(ToolCallParser("auto", "qwen3_coder", tools=TOOLS), pieces)
        assert got == content
        assert json.loads(calls[0]["arguments"]) == {"line": 5}


@pytest.mark.parametrize(
    ("cut", "arguments"),
    [
        ("<parameter=line>\n5\n</parameter>\n", {"line": 5}),
        ("<parameter=line>\n5\n</param", {"line": 5}),  # a closing tag begun
        ("<parameter=path>\nsrc/ma", {"path": "src/ma"}),
        ("<parameter=pa", {}),
    ],
)
def test_a_call_the_output_cuts_off_ends_with_its_arguments_closed(
    cut: str, arguments: dict[str, Any]
) -> None:
    parser = ToolCallParser("auto", "qwen3_coder", tools=TOOLS)
    _, calls = run(parser, [f"<tool_call>\n<function=edit>\n{cut}"])
    assert [c["name"] for c in calls] == ["edit"]
    assert json.loads(calls[0]["arguments"]) == arguments
    assert parser.calls == 1 and parser.called


@pytest.mark.parametrize(
    ("text", "schema", "value"),
    [
        ("3.5", {"type": "number"}, 3.5),
        ("3.5", {"type": "string"}, "3.5"),
        ("true", {"type": ["boolean", "string"]}, True),
        ("1.0", {"type": ["string", "boolean"]}, "1.0"),  # not a boolean: the text
        ('{"a": 1}', None, {"a": 1}),
        ("plain words", None, "plain words"),
        ('"quoted"', {"anyOf": [{"type": "string"}, {"type": "null"}]}, '"quoted"'),
        ("null", {"anyOf": [{"type": "string"}, {"type": "null"}]}, None),
        ('"quoted"', None, '"quoted"'),  # written raw: the quotes are the value's
        ("NaN", {"type": "number"}, "NaN"),  # not JSON: kept as written
        ("1e999", None, "1e999"),
        ("7", {"type": "number"}, 7),
        ("True", {"type": "boolean"}, True),
        ("False", None, "False"),
        ("2", {"enum": ["1", "2"]}, "2"),  # an enum of strings is a string
        ("2", {"enum": [1, 2]}, 2),
    ],
)
def test_typed(text: str, schema: Any, value: Any) -> None:
    assert typed(text, schema) == value


QWEN3_CODER_TEMPLATE = (
    "{% for tool in tools %}{{ tool | tojson }}{% endfor %}"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
    "value_1\n</parameter>\n</function>\n</tool_call>"
)


def test_the_format_is_found_in_the_template_and_the_option_overrides_it() -> None:
    assert tool_format(QWEN3_CODER_TEMPLATE, {}) == "qwen3_coder"
    assert tool_format(QWEN3_CODER_TEMPLATE, {"tool_format": "hermes"}) == "hermes"
    assert tool_format("{{ tools }}<tool_call>", {}) == "hermes"
    # Seed-OSS writes the same function tags inside its own <seed:tool_call>
    seed = QWEN3_CODER_TEMPLATE.replace("<tool_call>", "<seed:tool_call>").replace(
        "</tool_call>", "</seed:tool_call>"
    )
    assert tool_format(seed, {}) == "hermes"
