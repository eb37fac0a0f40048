"""Anthropic's server tools with no search backend: a model that calls web_search or
web_fetch gets its call answered in Anthropic's own protocol as unavailable (the call as a
server_tool_use block, its result an error block, the turn paused), through Anthropic's
client, whole and streamed; sent back as it is, the conversation goes on, the model
reading that search is off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from coderai.front.api.anthropic.server_tools import UNAVAILABLE
from tests.support.server import Server, running

TOOLS: Any = [
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    {"type": "web_fetch_20250910", "name": "web_fetch"},
]


def _call(name: str, arguments: dict[str, str]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    def scripted(call: str) -> dict[str, Any]:
        return {"script": [call, "Noted: {tool_result}"], "tool_format": "hermes"}

    models: list[dict[str, Any]] = [
        {"id": "search", "format": "fake",
         "options": scripted(_call("web_search", {"query": "coderai"}))},
        {"id": "fetch", "format": "fake",
         "options": scripted(_call("web_fetch", {"url": "https://example.org/"}))},
    ]  # fmt: skip
    with running(tmp_path_factory.mktemp("srv"), models, tmp_path_factory.mktemp("c")) as srv:
        yield srv


@pytest.fixture
def claude(server: Server) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as client:
        yield client


ASK: Any = [{"role": "user", "content": "What is CoderAI?"}]


@pytest.mark.parametrize(
    ("model", "result", "error"),
    [("search", "web_search_tool_result", "web_search_tool_result_error"),
     ("fetch", "web_fetch_tool_result", "web_fetch_tool_result_error")],
)  # fmt: skip
def test_a_server_tool_call_is_answered_as_unavailable_and_the_turn_goes_on(
    claude: anthropic.Anthropic, model: str, result: str, error: str
) -> None:
    message = claude.messages.create(model=model, max_tokens=100, messages=ASK, tools=TOOLS)
    assert message.stop_reason == "pause_turn"
    use, answer = (block.model_dump() for block in message.content)
    assert use["type"] == "server_tool_use" and use["id"].startswith("srvtoolu_")
    assert use["name"] == f"web_{model}" and use["input"]
    assert answer["type"] == result and answer["tool_use_id"] == use["id"]
    assert answer["content"] == {"type": error, "error_code": "unavailable"}
    # as the API asks of a paused turn: the conversation sent back as it is goes on
    paused: Any = [*ASK, {"role": "assistant", "content": [use, answer]}]
    again = claude.messages.create(model=model, max_tokens=100, tools=TOOLS, messages=paused)
    block: Any = again.content[0]
    assert again.stop_reason == "end_turn"
    assert block.text == f"Noted: {UNAVAILABLE[f'web_{model}']}"


def test_the_streamed_answer_has_the_same_blocks(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(model="search", max_tokens=100, messages=ASK, tools=TOOLS) as s:
        final = s.get_final_message()
    kinds = [block.type for block in final.content]
    assert kinds == ["server_tool_use", "web_search_tool_result"]
    assert final.stop_reason == "pause_turn"
    use: Any = final.content[0]
    assert use.input == {"query": "coderai"}
