"""Calls a model writes without their tags (Qwen2.5-Coder's habit): taken as calls only
where the whole answer is one object naming an offered tool with arguments its schema
accepts; everything else stays text, and streamed text is held only while it may still
become a call."""

from __future__ import annotations

import json

import pytest

from coderai.bus.messages import Job
from coderai.engine.backends.base import Sequence
from coderai.engine.backends.fake import FakeInstance
from coderai.engine.decoding import structured
from coderai.engine.decoding.bare_call import BareCallReader, BareCallScanner
from coderai.engine.decoding.tool_parse import ToolCallParser
from coderai.errors import JobError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}},
                "required": ["path"],
            },
        },
    }
]
CALL = '{"name": "read_file", "arguments": {"path": "src/main.py"}}'


def read(text: str, pieces: int = 1) -> tuple[str, list[tuple[str, str]], bool]:
    """Feed `text` in `pieces` about equal parts: (content, [(name, arguments)], called)."""
    reader = BareCallReader(ToolCallParser("auto", "hermes", tools=TOOLS), TOOLS)
    step = max(1, len(text) // pieces)
    outs = [reader.feed(text[i : i + step]) for i in range(0, len(text), step)]
    outs.append(reader.finish())
    content = "".join(o.content for o in outs)
    calls = [(d.name, d.arguments) for o in outs for d in o.calls]
    return content, calls, reader.called


@pytest.mark.parametrize(
    "text",
    [CALL, f"  \n{CALL}\n", f"```json\n{CALL}\n```", f"```\n{CALL}\n```\n", f"```json\n{CALL}"],
)
@pytest.mark.parametrize("pieces", [1, 7, 1000])
def test_one_bare_or_fenced_call_is_a_call(text: str, pieces: int) -> None:
    content, calls, called = read(text, pieces)
    assert content == ""
    assert calls == [("read_file", json.dumps({"path": "src/main.py"}))]
    assert called


def test_arguments_given_as_a_json_string_or_under_parameters_are_read() -> None:
    as_string = json.dumps({"name": "read_file", "arguments": json.dumps({"path": "a"})})
    assert read(as_string)[1] == [("read_file", '{"path": "a"}')]
    assert read('{"name": "read_file", "parameters": {"path": "a"}}')[1] == [
        ("read_file", '{"path": "a"}')
    ]


@pytest.mark.parametrize(
    "text",
    [
        'To read a file, answer {"name": "read_file", "arguments": {"path": "x"}}.',
        f"{CALL}\nThat reads the file.",
        f"{CALL}\n{CALL}",
        '{"name": "write_file", "arguments": {"path": "x"}}',  # not offered
        '{"name": "read_file", "arguments": {"lines": 3}}',  # its schema needs a path
        '{"name": "read_file", "arguments": {"path": 3}}',  # a path is a string
        '{"name": "read_file", "arguments": {"path": "x"}, "id": 1}',  # other keys
        '{"type": "object", "properties": {"name": {"type": "string"}}}',  # JSON, no call
        "```python\nprint('hi')\n```",
        f"```json\n{CALL}\n``` and more",
        '{"name": "read_file", "arguments": {"path": "x"}',  # cut off
    ],
)
def test_anything_else_stays_text_whole(text: str) -> None:
    for pieces in (1, 5, 1000):
        content, calls, called = read(text, pieces)
        assert (content, calls, called) == (text, [], False)


def test_text_that_cannot_become_a_call_is_not_held() -> None:
    reader = BareCallReader(ToolCallParser("auto", "hermes", tools=TOOLS), TOOLS)
    assert reader.feed("{").content == ""  # may still be a call
    assert reader.feed('"name": "read_file"} x').content == '{"name": "read_file"} x'
    fresh = BareCallReader(ToolCallParser("auto", "hermes", tools=TOOLS), TOOLS)
    assert fresh.feed("Sure").content == "Sure"


@pytest.mark.parametrize(
    ("start", "rest"),
    [
        ('```json\n{"type"', ': "object", "properties": {}}\n```'),  # a key no call has
        ('{"name": "write_file"', ', "arguments": {}}'),  # a tool not offered
    ],
)
def test_json_that_is_no_call_goes_out_as_soon_as_that_is_known(start: str, rest: str) -> None:
    reader = BareCallReader(ToolCallParser("auto", "hermes", tools=TOOLS), TOOLS)
    assert reader.feed(start[:-1]).content == ""  # not known yet
    assert reader.feed(start[-1]).content == start
    assert reader.feed(rest).content == rest
    assert reader.finish().calls == []


def test_a_schema_the_validator_cannot_use_leaves_the_answer_text() -> None:
    broken = [{"type": "function", "function": {
        "name": "read_file", "parameters": {"$ref": "#/definitions/missing"}}}]  # fmt: skip
    reader = BareCallReader(ToolCallParser("auto", "hermes", tools=broken), broken)
    out = reader.feed(CALL)
    tail = reader.finish()
    assert (out.content + tail.content, tail.calls) == (CALL, [])


def test_a_tagged_call_is_read_as_the_model_writes_it() -> None:
    text = f"<tool_call>\n{CALL}\n</tool_call>"
    content, calls, called = read(text, 9)
    assert content == "" and called
    assert [name for name, _ in calls if name] == ["read_file"]


def test_the_scanner_knows_braces_inside_strings() -> None:
    scanner = BareCallScanner()
    assert scanner.feed('{"name": "} ``` {"}')
    assert scanner.whole()
    assert not scanner.feed(" x")


def prepared(options: dict[str, object], tool_choice: str = "auto") -> Sequence:
    """A chat job offering TOOLS, set up as the scheduler sets it up on a fake model."""
    model = {"id": "m", "path": "", "format": "fake", "options": options}
    seq = Sequence(Job(1, model, "chat", tools=TOOLS, tool_choice=tool_choice))
    structured.prepare(seq, FakeInstance({}))
    return seq


def test_a_job_with_tools_reads_untagged_calls_unless_its_model_says_not() -> None:
    assert isinstance(prepared({}).parser, BareCallReader)
    assert isinstance(prepared({"bare_tool_calls": False}).parser, ToolCallParser)
    assert prepared({}, tool_choice="none").parser is None


def test_a_bare_tool_calls_option_that_is_not_a_boolean_fails_its_job_naming_it() -> None:
    with pytest.raises(JobError, match="bare_tool_calls must be true or false"):
        prepared({"bare_tool_calls": "no"})
