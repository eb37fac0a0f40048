"""Anthropic's server tools, `web_search_*` and `web_fetch_*` (Claude Code's WebSearch
and WebFetch send them), in their own protocol. With no search backend configured, the
model is offered each as a function (`web_search` with a query, `web_fetch` with a URL);
when it calls one, the answer carries the call as a `server_tool_use` block, then the
result block Anthropic defines for a tool that cannot run now (`web_search_tool_result`
holding a `web_search_tool_result_error`, `web_fetch_tool_result` holding a
`web_fetch_tool_result_error`, each with error_code `unavailable`), and ends with stop_reason
`pause_turn`: a client sends the conversation back as it is, and the model, reading that
search is off, goes on. Claude Code's WebSearch reads the error and tells its user.

Sent back, a `server_tool_use` block is an assistant's call and its result block that
call's tool message (`what_the_model_reads`)."""

from __future__ import annotations

import uuid
from typing import Any

#: each server tool's result block type
RESULT_TYPES = {"web_search": "web_search_tool_result", "web_fetch": "web_fetch_tool_result"}
#: and the error its content holds when the tool cannot run
_ERROR_TYPES = {
    "web_search": "web_search_tool_result_error",
    "web_fetch": "web_fetch_tool_result_error",
}
#: the function each one is to the model
_FUNCTIONS = {
    "web_search": {
        "description": "Search the web. Returns the results' titles, addresses and text.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                       "required": ["query"]},
    },
    "web_fetch": {
        "description": "Fetch a web page or document by its URL. Returns its text.",
        "parameters": {"type": "object", "properties": {"url": {"type": "string"}},
                       "required": ["url"]},
    },
}  # fmt: skip
#: what the model reads of a tool that could not run
UNAVAILABLE = {
    "web_search": "Web search is unavailable: this server has no search backend configured.",
    "web_fetch": "Web fetch is unavailable: this server has no fetch backend configured.",
}


def kind_of(tool_type: str) -> str | None:
    """`web_search` or `web_fetch` for a server tool's versioned type, else None."""
    for kind in RESULT_TYPES:
        if tool_type.startswith(f"{kind}_"):
            return kind
    return None


def function(kind: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": kind, **_FUNCTIONS[kind]}}


def server_tool_use_id() -> str:
    return f"srvtoolu_{uuid.uuid4().hex[:24]}"


def unavailable(kind: str, tool_use_id: str) -> dict[str, Any]:
    """The result block of a call that could not run: no backend is configured."""
    error = {"type": _ERROR_TYPES[kind], "error_code": "unavailable"}
    return {"type": RESULT_TYPES[kind], "tool_use_id": tool_use_id, "content": error}


def what_the_model_reads(kind: str, content: Any) -> str:
    """A result block's content sent back, as the tool message's text."""
    if isinstance(content, dict) and "error_code" in content:
        code = content.get("error_code")
        return UNAVAILABLE[kind] if code == "unavailable" else f"{kind} failed: {code}"
    if isinstance(content, list):  # search results
        return "\n\n".join(
            f"{r.get('title', '')}\n{r.get('url', '')}" for r in content if isinstance(r, dict)
        )
    if isinstance(content, dict):  # a fetched document
        source = (content.get("content") or {}).get("source") or {}
        return f"{content.get('url', '')}\n{source.get('data', '')}"
    return str(content)
