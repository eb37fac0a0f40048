"""Anthropic's server tools with no search backend: a model that calls web_search or
web_fetch gets its call answered in Anthropic's own protocol as unavailable (the call as a
server_tool_use block, its result an error block, the turn paused), through Anthropic's
client, whole and streamed; sent back as it is, the conversation goes on, the model
reading that search is off."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from coderai.config import SearchConfig
from coderai.front.api.anthropic.server_tools import UNAVAILABLE
from coderai.front.web import page
from coderai.front.web.searxng import SearchFailed
from tests.support import agents, searxng
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


# -- with a search backend (a stand-in speaking SearXNG's JSON API) ------------------------------


#: a page of the stand-in's that redirects to another host
REDIRECT = "redirect?to=https://blog.example.net/post/3"


@pytest.fixture(scope="module")
def searx() -> Iterator[searxng.Standin]:
    with searxng.running() as standin:
        yield standin


@pytest.fixture(scope="module")
def searching(tmp_path_factory: pytest.TempPathFactory, searx: searxng.Standin) -> Iterator[Server]:
    fetch = _call("web_fetch", {"url": f"{searx.url}/page/2"})
    models: list[dict[str, Any]] = [
        {"id": "search", "format": "fake", "options": {
            "script": [_call("web_search", {"query": "coderai"}), "Noted: {tool_result}"]}},
        {"id": "fetch", "format": "fake", "options": {
            "script": [fetch, "Noted: {tool_result}"]}},
        *({"id": f"fetch-{name}", "format": "fake", "options": {
            "script": [_call("web_fetch", {"url": f"{searx.url}/{path}"}), "Noted."]}}
          for name, path in (("redirect", REDIRECT), ("big", "big"))),
        # Claude Code's WebSearch: its own tool, then Anthropic's web_search, asked again
        {"id": "claude-search", "format": "fake", "options": {
            "script": [_call("WebSearch", {"query": "coderai"}), "Found: {tool_result}"],
            "script_rules": [["Perform a web search for the query",
                              _call("web_search", {"query": "coderai"})]]}},
    ]  # fmt: skip
    srv = Server(tmp_path_factory.mktemp("searching"), {"engines": 1}, models,
                 # the stand-in's pages are on this host: a public one is not at hand
                 extra_config={"search": {"url": searx.url, "max_results": 3,
                                          "fetch_private": True}})  # fmt: skip
    try:
        srv.wait_ready(1)
        yield srv
    finally:
        srv.stop()


def test_a_search_runs_on_the_backend_and_the_model_reads_its_results(
    searching: Server, searx: searxng.Standin
) -> None:
    with anthropic.Anthropic(base_url=searching.url, api_key="x", max_retries=0) as claude:
        tools: Any = [{"type": "web_search_20250305", "name": "web_search",
                       "blocked_domains": ["example.net"]}]  # fmt: skip
        message = claude.messages.create(model="search", max_tokens=100, messages=ASK,
                                         tools=tools)  # fmt: skip
        assert message.stop_reason == "pause_turn" and searx.queries[-1] == "coderai"
        use, found = (block.model_dump() for block in message.content)
        assert found["type"] == "web_search_tool_result" and found["tool_use_id"] == use["id"]
        results = found["content"]
        assert [r["url"] for r in results] == [f"{searx.url}/page/1", f"{searx.url}/page/2"]
        assert results[0]["title"] == "coderai result 1" and results[0]["page_age"]
        paused: Any = [*ASK, {"role": "assistant", "content": [use, found]}]
        again: Any = claude.messages.create(model="search", max_tokens=300, messages=paused,
                                            tools=tools).content[0]  # fmt: skip
    assert again.text.startswith("Noted: coderai result 1\n")
    assert "Snippet 2 about coderai." in again.text  # the snippet, read back for the model


def test_a_fetch_reads_the_page_of_an_address_the_conversation_holds(
    searching: Server, searx: searxng.Standin
) -> None:
    tools: Any = [{"type": "web_fetch_20250910", "name": "web_fetch", "max_content_tokens": 10}]
    asked: Any = [{"role": "user", "content": f"Read {searx.url}/page/2 please"}]
    with anthropic.Anthropic(base_url=searching.url, api_key="x", max_retries=0) as claude:
        with claude.messages.stream(model="fetch", max_tokens=100, messages=asked,
                                    tools=tools) as stream:  # fmt: skip
            final = stream.get_final_message()
        refused = claude.messages.create(model="fetch", max_tokens=100, messages=ASK,
                                         tools=tools)  # fmt: skip
    fetched = final.content[1].model_dump()
    assert fetched["type"] == "web_fetch_tool_result"
    page = fetched["content"]
    assert page["type"] == "web_fetch_result" and page["url"] == f"{searx.url}/page/2"
    assert page["content"]["title"] == "Page 2"
    # its visible text, a line per block, cut at max_content_tokens (four characters each)
    text = "Result 2\nCoderAI serves models to coding agents.\nPage number 2."
    assert page["content"]["source"]["data"] == text[:40]
    error = refused.content[1].model_dump()["content"]
    assert error == {
        "type": "web_fetch_tool_result_error",
        "error_code": "url_not_in_prior_context",
    }


def test_claude_codes_web_search_cites_a_result_of_the_backend(
    searching: Server, searx: searxng.Standin, tmp_path: Path
) -> None:
    argv, env = agents.claude_launch(searching.url, "claude-search", "Search the web for coderai")
    done = agents.run([*argv, "WebSearch"], env, home=tmp_path, timeout=50)
    assert done.code == 0, done.describe()
    result = agents.claude_result(done)["result"]
    assert result.startswith("Found: ") and f"{searx.url}/page/1" in result, result


def _fetched(searching: Server, model: str, url: str, tool: dict[str, Any]) -> Any:
    tools: Any = [{"type": "web_fetch_20250910", "name": "web_fetch", **tool}]
    asked: Any = [{"role": "user", "content": f"Read {url}"}]
    with anthropic.Anthropic(base_url=searching.url, api_key="x", max_retries=0) as claude:
        message = claude.messages.create(model=model, max_tokens=50, messages=asked, tools=tools)
    return message.content[1].model_dump()["content"]


def test_a_redirect_is_checked_as_the_address_it_leads_to(
    searching: Server, searx: searxng.Standin
) -> None:
    blocked = {"blocked_domains": ["example.net"]}
    error = _fetched(searching, "fetch-redirect", f"{searx.url}/{REDIRECT}", blocked)
    assert error["error_code"] == "url_not_allowed"


def test_a_large_page_is_read_to_its_limit(searching: Server, searx: searxng.Standin) -> None:
    page = _fetched(searching, "fetch-big", f"{searx.url}/big", {})
    data = page["content"]["source"]["data"]
    assert len(data) == 100_000 and data.startswith("word word")  # search.fetch_max_chars


def test_an_address_that_is_not_public_is_not_fetched(searx: searxng.Standin) -> None:
    """Without search.fetch_private, the host's own services (and cloud metadata) are out
    of reach, whatever the conversation holds."""
    settings = SearchConfig(url=searx.url)
    by_name = searx.url.replace("127.0.0.1", "localhost")  # looked up, then refused
    for url in (f"{searx.url}/page/1", f"{by_name}/page/1"):
        with pytest.raises(SearchFailed) as refused:
            asyncio.run(page.fetch(settings, url, lambda _url: ""))
        assert refused.value.code == "url_not_accessible" and "not public" in str(refused.value)
