"""The pure parts of the server tools' web access: a page's visible text, the addresses
a conversation holds, which addresses are public and which domains a request allows; a
paused turn's history with several server calls; a compaction with no summary."""

from __future__ import annotations

import asyncio
from typing import Any

from coderai.config import SearchConfig
from coderai.front.api.anthropic.request import NOT_BUILT, MessagesRequest
from coderai.front.api.anthropic.server_tools import Runner, urls_in
from coderai.front.api.responses.compaction import NO_SUMMARY, compaction_item
from coderai.front.api.responses.request import CompactionItem
from coderai.front.api.translation import validate
from coderai.front.web.page import html_text, is_public
from coderai.front.web.searxng import host_allowed


def test_a_pages_text_is_its_visible_text_even_without_a_closing_head() -> None:
    markup = ("<html><head><title>T &amp; U</title><style>x{}</style><body><h1>Hello</h1>"
              "<svg><title>icon</title></svg><p>one  two</p><script>no()</script>")  # fmt: skip
    assert html_text(markup) == ("T & U", "Hello\none two")


def test_the_addresses_a_conversation_holds_are_whole() -> None:
    seen = urls_in("See https://a.org/x, and (http://b.net/y?q=1).")
    assert {"https://a.org/x", "http://b.net/y?q=1"} <= seen
    assert "https://a.org/" not in seen  # a prefix of one is not one


def test_public_addresses_and_domains() -> None:
    assert is_public("93.184.215.14") and is_public("2606:4700::1111")
    for private in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.0.1", "::1"):
        assert not is_public(private)
    assert host_allowed("https://docs.a.org/x", ["a.org"], None)
    assert not host_allowed("https://b.org/x", ["a.org"], None)
    assert not host_allowed("https://x.b.org/", None, ["b.org"])


def test_a_paused_turn_with_two_server_calls_reads_back_as_one_turn() -> None:
    error = {"type": "web_search_tool_result_error", "error_code": "unavailable"}
    turn: Any = [
        {"type": "server_tool_use", "id": f"s{i}", "name": "web_search", "input": {"query": q}}
        for i, q in ((1, "a"), (2, "b"))
    ] + [{"type": "web_search_tool_result", "tool_use_id": f"s{i}", "content": error}
         for i in (1, 2)]  # fmt: skip
    tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": turn}]
    body = {"model": "m", "max_tokens": 9, "tools": tools, "messages": messages}
    req = validate(MessagesRequest, body, NOT_BUILT)
    roles = [m["role"] for m in req.chat_body()["messages"]]
    assert roles == ["user", "assistant", "tool", "tool"]
    assert req.server_uses() == {"web_search": 2}  # max_uses counts the paused turn's calls
    runner = Runner(SearchConfig(url="http://search.invalid"), req.server_limits(), set(),
                    req.server_uses())  # fmt: skip
    third = asyncio.run(runner("web_search", '{"query": "c"}', "s3"))
    assert third["content"]["error_code"] == "max_uses_exceeded"


def test_a_compaction_with_no_summary_is_still_ours() -> None:
    item = compaction_item("   ")
    read = CompactionItem.model_validate(item)
    assert read.summary() == NO_SUMMARY
