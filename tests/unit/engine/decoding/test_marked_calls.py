"""DeepSeek-V3.1's and Kimi-K2's tool calls: sections of calls between special-token
markers, however the text is cut; and the formats found in chat templates."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coderai.engine.decoding.chat_template import tool_format
from coderai.engine.decoding.marked_calls import MARKERS, Markers
from coderai.engine.decoding.tool_parse import ToolCallParser
from tests.unit.engine.decoding.test_tool_parse import cuts, run

ARGS = {"path": "a<b>.py", "lines": [1, 2], "note": 'x"y'}


def section(m: Markers, *calls: tuple[str, str]) -> str:
    body = "".join(f"{m.begin}{name}{m.sep}{args}{m.end}" for name, args in calls)
    return f"{m.section}{body}{m.section_end}"


def ids(fmt: str, name: str, n: int) -> str:
    return f"functions.{name}:{n}" if fmt == "kimi_k2" else name


@pytest.mark.parametrize("fmt", list(MARKERS))
def test_a_section_of_calls_after_text(fmt: str) -> None:
    m = MARKERS[fmt]
    text = "Let me look." + section(
        m, (ids(fmt, "read", 0), json.dumps(ARGS)), (ids(fmt, "list", 1), "{}")
    )
    for pieces in [*cuts(text), [text + " More text."]]:
        parser = ToolCallParser("auto", fmt)
        content, calls = run(parser, pieces)
        assert content.startswith("Let me look.")
        assert [c["name"] for c in calls] == ["read", "list"]
        assert json.loads(calls[0]["arguments"]) == ARGS
        assert json.loads(calls[1]["arguments"]) == {}
        assert parser.calls == 2 and parser.called


@pytest.mark.parametrize("fmt", list(MARKERS))
@given(points=st.lists(st.integers(min_value=1, max_value=200), max_size=12))
def test_any_cut_gives_the_same_calls(fmt: str, points: list[int]) -> None:
    text = section(MARKERS[fmt], (ids(fmt, "read", 0), json.dumps(ARGS)))
    marks = sorted({0, *(p for p in points if p < len(text)), len(text)})
    _, calls = run(ToolCallParser("auto", fmt), [text[a:b] for a, b in itertools.pairwise(marks)])
    assert [c["name"] for c in calls] == ["read"]
    assert json.loads(calls[0]["arguments"]) == ARGS


@pytest.mark.parametrize("fmt", list(MARKERS))
def test_a_call_the_output_cuts_off_keeps_what_it_had(fmt: str) -> None:
    m = MARKERS[fmt]
    parser = ToolCallParser("auto", fmt)
    _, calls = run(parser, [f"{m.section}{m.begin}{ids(fmt, 'read', 0)}{m.sep}" + '{"path": "a'])
    assert calls == [{"name": "read", "arguments": '{"path": "a'}]
    assert parser.calls == 1


@pytest.mark.parametrize("fmt", list(MARKERS))
def test_parallel_tool_calls_false_reads_the_first_call_only(fmt: str) -> None:
    m = MARKERS[fmt]
    parser = ToolCallParser("auto", fmt, single=True)
    text = section(m, (ids(fmt, "read", 0), "{}"), (ids(fmt, "list", 1), "{}"))
    _, calls = run(parser, [text])
    assert [c["name"] for c in calls] == ["read"] and parser.done


def test_the_formats_are_found_in_their_templates() -> None:
    v31 = MARKERS["deepseek_v31"]
    template = f"{{{{ tools }}}}{v31.section}{v31.begin}{{{{ name }}}}{v31.sep}{{{{ args }}}}"
    assert tool_format(template, {}) == "deepseek_v31"
    # DeepSeek-V3 and R1 write `function`, the name and fenced JSON: not this format
    assert tool_format(template + "```json", {}) == "hermes"
    kimi = f"{{{{ tools }}}}{MARKERS['kimi_k2'].section}"
    assert tool_format(kimi, {}) == "kimi_k2"


@pytest.mark.parametrize("fmt", list(MARKERS))
@pytest.mark.parametrize("after", ["Done.", "<|foo bar"])
def test_text_after_a_section_left_open_is_content(fmt: str, after: str) -> None:
    """A section that ends without its marker: what follows its last call is read again
    as content, not lost."""
    m = MARKERS[fmt]
    text = f"{m.section}{m.begin}{ids(fmt, 'read', 0)}{m.sep}{{}}{m.end}{after}"
    for pieces in cuts(text):
        content, calls = run(ToolCallParser("auto", fmt), pieces)
        assert content == after and [c["name"] for c in calls] == ["read"]
    content, calls = run(ToolCallParser("auto", fmt), [f"{m.section}Hello"])
    assert content == "Hello" and calls == []


@pytest.mark.parametrize("fmt", list(MARKERS))
def test_a_call_cut_off_in_its_end_marker_keeps_its_arguments_only(fmt: str) -> None:
    m = MARKERS[fmt]
    text = f"{m.section}{m.begin}{ids(fmt, 'read', 0)}{m.sep}" + '{"a": 1}' + m.end[:-3]
    _, calls = run(ToolCallParser("auto", fmt), [text])
    assert calls == [{"name": "read", "arguments": '{"a": 1}'}]
