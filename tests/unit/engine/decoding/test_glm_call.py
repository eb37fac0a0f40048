"""GLM-4.5's tool calls: the name, key and value tags, values typed by the tool's schema,
however the text is cut; and the format found in a chat template."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coderai.engine.decoding.chat_template import tool_format
from coderai.engine.decoding.tool_parse import ToolCallParser
from tests.unit.engine.decoding.test_tool_parse import cuts, run
from tests.unit.engine.decoding.test_xml_call import TOOLS


def call(name: str, **args: str) -> str:
    pairs = "".join(
        f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in args.items()
    )
    return f"<tool_call>{name}\n{pairs}</tool_call>"


EDIT = call("edit", path='src/a "b".py', line="12", changes='[{"old": "x"}]', note="a\nb")
EDIT_ARGS = {"path": 'src/a "b".py', "line": 12, "changes": [{"old": "x"}], "note": "a\nb"}


def parser(**extra: Any) -> ToolCallParser:
    return ToolCallParser("auto", "glm45", tools=TOOLS, **extra)


@pytest.mark.parametrize("pieces", cuts("Editing.\n" + EDIT + "\n" + call("edit") + " done"))
def test_calls_are_read_with_values_typed_by_the_schema(pieces: list[str]) -> None:
    p = parser()
    content, calls = run(p, pieces)
    assert content == "Editing.\n done"
    assert [c["name"] for c in calls] == ["edit", "edit"]
    assert json.loads(calls[0]["arguments"]) == EDIT_ARGS
    assert json.loads(calls[1]["arguments"]) == {}  # a call without arguments
    assert p.calls == 2 and p.called


@given(st.lists(st.integers(min_value=1, max_value=len(EDIT)), max_size=12))
def test_any_cut_gives_the_same_call(points: list[int]) -> None:
    marks = sorted({0, *points, len(EDIT)})
    content, calls = run(parser(), [EDIT[a:b] for a, b in itertools.pairwise(marks)])
    assert content == "" and len(calls) == 1
    assert json.loads(calls[0]["arguments"]) == EDIT_ARGS


def test_a_name_on_the_same_line_as_its_first_key_is_read() -> None:
    _, calls = run(
        parser(), ["<tool_call>edit<arg_key>line</arg_key><arg_value>3</arg_value></tool_call>"]
    )
    assert calls == [{"name": "edit", "arguments": '{"line": 3}'}]


@pytest.mark.parametrize(
    ("cut", "arguments"),
    [
        ("<arg_key>line</arg_key>\n<arg_value>5</arg_value>\n", {"line": 5}),
        ("<arg_key>path</arg_key>\n<arg_value>src/ma</arg_va", {"path": "src/ma"}),
        ("<arg_key>pa", {}),
        ("", {}),
    ],
)
def test_a_call_the_output_cuts_off_ends_with_its_arguments_closed(
    cut: str, arguments: dict[str, Any]
) -> None:
    p = parser()
    _, calls = run(p, [f"<tool_call>edit\n{cut}"])
    assert [c["name"] for c in calls] == ["edit"]
    assert json.loads(calls[0]["arguments"]) == arguments
    assert p.calls == 1


def test_text_where_a_tag_must_be_ends_the_call_and_is_read_after_it() -> None:
    text = "<tool_call>edit\n<arg_key>line</arg_key>\n<arg_value>5</arg_value>\noops"
    for pieces in cuts(text):
        content, calls = run(parser(), pieces)
        assert content == "oops" and json.loads(calls[0]["arguments"]) == {"line": 5}


def test_a_json_body_in_the_same_tags_is_read_as_hermes_writes_it() -> None:
    body = '<tool_call>\n{"name": "edit", "arguments": {"line": 3}}\n</tool_call>'
    content, calls = run(parser(), cuts(body)[1])
    assert content == "" and [c["name"] for c in calls] == ["edit"]
    assert json.loads(calls[0]["arguments"]) == {"line": 3}


def test_parallel_tool_calls_false_reads_the_first_call_only() -> None:
    p = parser(single=True)
    _, calls = run(p, [call("edit", line="1") + call("edit", line="2")])
    assert [json.loads(c["arguments"]) for c in calls] == [{"line": 1}]
    assert p.done


GLM_TEMPLATE = (
    "{% for tool in tools %}{{ tool | tojson }}{% endfor %}"
    "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
    "<arg_value>{arg-value-1}</arg_value>\n</tool_call>"
)


def test_the_format_is_found_in_the_template() -> None:
    assert tool_format(GLM_TEMPLATE, {}) == "glm45"
    assert tool_format(GLM_TEMPLATE, {"tool_format": "hermes"}) == "hermes"
