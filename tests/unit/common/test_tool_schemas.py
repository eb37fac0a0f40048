"""Any tool schema is taken: what the grammar engine does not implement is skipped and
named (grammar.TOOL), every published MCP server's tools compile for every grammar the
engines build, and a whole call is checked after the fact (engine/decoding/call_check)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coderai.common import grammar
from coderai.engine.decoding.call_check import CallCheck, breaks
from coderai.errors import InvalidRequest
from coderai.front.api.openai.schemas import UNENFORCED_HEADER, ChatRequest, parse
from tests.support.tools import MCP_DATA, mcp_servers

SERVERS = mcp_servers()


def _tools(server: str) -> list[dict[str, Any]]:
    listed = json.loads((MCP_DATA / server).read_text())
    return [{"type": "function", "function": {"name": t["name"], "parameters": t["inputSchema"]}}
            for t in listed["tools"]]  # fmt: skip


def test_the_keywords_llguidance_names_are_read_from_its_warnings() -> None:
    warnings = ['Unimplemented keys: ["if", "then"]', 'Unimplemented keys: ["not", "if"]',
                "Unknown format: no-such"]  # fmt: skip
    assert grammar.skipped(warnings) == ["if", "then", "not", "Unknown format: no-such"]
    assert grammar.skipped([]) == []


@pytest.mark.parametrize("server", SERVERS)
def test_a_published_mcp_servers_tools_compile_for_every_grammar(server: str) -> None:
    tools = _tools(server)
    req = parse(ChatRequest, {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                              "tools": tools})  # fmt: skip
    for built in (
        grammar.required_grammar(tools, parallel=True),
        *(grammar.lazy_grammar(tools, fmt) for fmt in grammar.LAZY_FORMATS),
        *(grammar.named_grammar(tool) for tool in tools),
    ):
        skipped = grammar.check(built)
        assert set(skipped) <= {"propertyNames"}  # what these servers' schemas use
    named = req.notices.get(UNENFORCED_HEADER, "")
    assert ("browser_drop: propertyNames" in named) == (server == "Playwright.json")


def test_a_strict_tool_is_enforced_as_far_as_the_engine_can() -> None:
    tool = {"type": "function", "function": {"name": "f", "strict": True, "parameters": {
        "type": "object", "properties": {"a": {"not": {"type": "null"}}}}}}  # fmt: skip
    req = parse(ChatRequest, {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                              "tools": [tool], "tool_choice": "required"})  # fmt: skip
    assert req.notices == {UNENFORCED_HEADER: "tools[0] f: not"}


def test_a_whole_call_is_checked_against_all_of_its_schema() -> None:
    names = {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}
    schema = {"type": "object", "properties": {"h": names}, "dependentRequired": {"a": ["b"]}}
    assert breaks(schema, '{"h": {"ok": 1}}') == ""
    assert breaks(schema, '{"h": {"NO": 1}}').startswith("h: 'NO' does not match")
    assert "'b' is a dependency of 'a'" in breaks(schema, '{"a": 1}')
    assert breaks(schema, "{") == "its arguments are not JSON"
    assert breaks(None, "{}") == "no tool has that name"
    assert breaks({"$ref": "#/nowhere"}, "{}") == ""  # a schema it cannot read checks nothing


def test_calls_are_checked_once_whole_as_their_deltas_arrive() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}}}}]  # fmt: skip
    check = CallCheck(tools)
    check.add(0, "f", '{"n": ')
    check.add(0, "", '"x"}')
    check.add(1, "g", "{}")
    assert check.problems() == [
        "call 0 to 'f': n: 'x' is not of type 'integer'",
        "call 1 to 'g': no tool has that name",
    ]


def test_tool_choice_auto_over_no_tools_asks_nothing() -> None:
    """Codex's compaction turn sends tool_choice auto with tools: []; required is refused."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": []}
    assert parse(ChatRequest, {**body, "tool_choice": "auto"}).choice() == ("none", "")
    with pytest.raises(InvalidRequest) as refused:
        parse(ChatRequest, {**body, "tool_choice": "required"})
    assert refused.value.param == "tool_choice"
