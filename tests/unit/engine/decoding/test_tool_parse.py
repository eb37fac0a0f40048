"""The tool-call parser: content and calls out of a completion's text, however it is cut."""

from __future__ import annotations

import json

import pytest

from coderai.engine.decoding.tool_parse import ToolCallParser


def run(parser: ToolCallParser, pieces: list[str]) -> tuple[str, list[dict[str, str]]]:
    """Content and whole calls (name, arguments) from feeding the pieces in order."""
    content = ""
    calls: dict[int, dict[str, str]] = {}
    for piece in [*pieces, None]:
        out = parser.feed(piece) if piece is not None else parser.finish()
        content += out.content
        for delta in out.calls:
            call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            if delta.name:
                assert not call["name"], "a call's name comes once"
                call["name"] = delta.name
            call["arguments"] += delta.arguments
    return content, [calls[i] for i in sorted(calls)]


def cuts(text: str) -> list[list[str]]:
    """The text whole, a character at a time, and in pieces of 3."""
    return [[text], list(text), [text[i : i + 3] for i in range(0, len(text), 3)]]


ARGS = {"city": 'Paris, "FR" {x}', "days": [1, 2, {"a": "}"}]}
BODY = json.dumps({"name": "get_weather", "arguments": ARGS})


@pytest.mark.parametrize("pieces", cuts(f"Let me look.<tool_call>\n{BODY}\n</tool_call>"))
def test_hermes_call_after_text(pieces: list[str]) -> None:
    parser = ToolCallParser("auto", "hermes")
    content, calls = run(parser, pieces)
    assert content == "Let me look."
    assert [c["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["arguments"]) == ARGS
    assert parser.called and parser.calls == 1


TWO = f"<tool_call>{BODY}</tool_call>\n<tool_call>{BODY}</tool_call>"


@pytest.mark.parametrize("pieces", cuts(TWO))
def test_hermes_parallel_calls_have_their_own_index(pieces: list[str]) -> None:
    content, calls = run(ToolCallParser("auto", "hermes"), pieces)
    assert content == ""
    assert len(calls) == 2 and all(json.loads(c["arguments"]) == ARGS for c in calls)


def test_text_that_only_looks_like_a_marker_is_content() -> None:
    content, calls = run(ToolCallParser("auto", "hermes"), list("a <tool_ b <tool"))
    assert content == "a <tool_ b <tool" and calls == []


@pytest.mark.parametrize("pieces", cuts(f"[TOOL_CALLS][{BODY}, {BODY}]"))
def test_mistral_array(pieces: list[str]) -> None:
    content, calls = run(ToolCallParser("auto", "mistral"), pieces)
    assert content == "" and len(calls) == 2
    assert json.loads(calls[1]["arguments"]) == ARGS


LLAMA = json.dumps({"name": "get_weather", "parameters": ARGS})


@pytest.mark.parametrize("text", [LLAMA, f"  <|python_tag|>{LLAMA}", f"{LLAMA}; {LLAMA}"])
def test_llama3_output_that_starts_with_a_call(text: str) -> None:
    for pieces in cuts(text):
        content, calls = run(ToolCallParser("auto", "llama3"), pieces)
        assert content == "" and calls and calls[0]["name"] == "get_weather"
        assert all(json.loads(c["arguments"]) == ARGS for c in calls)


def test_llama3_text_is_content() -> None:
    content, calls = run(ToolCallParser("auto", "llama3"), list("Hello {not a call}"))
    assert content == "Hello {not a call}" and calls == []


def test_required_calls_array_and_named_arguments() -> None:
    for pieces in cuts(f"[{BODY},{BODY}]"):
        content, calls = run(ToolCallParser("calls"), pieces)
        assert content == "" and len(calls) == 2
    for pieces in cuts(json.dumps(ARGS)):
        parser = ToolCallParser("arguments", name="get_weather")
        content, calls = run(parser, pieces)
        assert calls == [{"name": "get_weather", "arguments": json.dumps(ARGS)}]
        assert parser.calls == 1


def test_arguments_before_the_name_are_kept() -> None:
    body = json.dumps({"arguments": ARGS, "name": "f"})
    _, calls = run(ToolCallParser("auto", "hermes"), list(f"<tool_call>{body}</tool_call>"))
    assert calls[0]["name"] == "f" and json.loads(calls[0]["arguments"]) == ARGS


def test_a_call_is_started_and_its_text_so_far_reported_once() -> None:
    parser = ToolCallParser("auto", "hermes")
    out = parser.feed('Hi <tool_call>{"na')
    assert out.began == '{"na' and out.content == "Hi "
    assert parser.feed('me": "x", ').began is None


def test_a_single_call_parser_is_done_after_its_first_call() -> None:
    for fmt, text in (("hermes", TWO), ("mistral", f"[TOOL_CALLS][{BODY}, {BODY}]")):
        parser = ToolCallParser("auto", fmt, single=True)
        out = parser.feed(text)  # both calls in one piece: the second is not read
        assert parser.done and {d.index for d in out.calls} == {0}
    assert not ToolCallParser("auto", "hermes").done


@pytest.mark.parametrize("text", ['{"answer": 42}', '  {"a": "{name}"}', "{ }"])
def test_llama3_json_that_is_not_a_call_is_content(text: str) -> None:
    for pieces in cuts(text):
        parser = ToolCallParser("auto", "llama3")
        assert run(parser, pieces) == (text, []) and not parser.called


def test_an_escaped_lone_surrogate_in_a_name_cannot_reach_the_bus() -> None:
    _, calls = run(ToolCallParser("calls"), ['[{"name": "a\\ud800", "arguments": {}}]'])
    calls[0]["name"].encode("utf-8")  # would raise for a lone surrogate
