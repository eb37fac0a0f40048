"""Anthropic's server tools, `web_search_*` and `web_fetch_*` (Claude Code's WebSearch
and WebFetch send them), in their own protocol. With no search backend configured, the
model is offered each as a function (`web_search` with a query, `web_fetch` with a URL);
when it calls one, the answer carries the call as a `server_tool_use` block, then the
result block Anthropic defines for a tool that cannot run now (`web_search_tool_result`
holding a `web_search_tool_result_error`, `web_fetch_tool_result` holding a
`web_fetch_tool_result_error`, each with error_code `unavailable`), and ends with stop_reason
`pause_turn`: a client sends the conversation back as it is, and the model, reading that
search is off, goes on. Claude Code's WebSearch reads the error and tells its user.

With a backend (the config's `search.url`, a SearXNG instance), the server runs the call
itself (Runner: front/web/): a search's results become `web_search_result` blocks (title,
url, page_age, and the snippet in `encrypted_content`, ours: base64 under a prefix, read
back for the model), a fetch's page a `web_fetch_result` holding its text as a document;
a failure is the error block with Anthropic's code for it. A fetch is made only of a URL
the conversation already holds (`url_not_in_prior_context` otherwise, as Anthropic's
own tool refuses), so that a model cannot be steered into sending what it read to an
address of an attacker's choosing; `max_uses` bounds the calls one answer runs.
Cited answers (text blocks with `citations`) are not built: the model reads the results
and writes its answer without them.

Sent back, a `server_tool_use` block is an assistant's call and its result block that
call's tool message (`what_the_model_reads`)."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from coderai.config import SearchConfig
from coderai.front.api.responses.reasoning_copy import seal, unseal
from coderai.front.web import page, searxng
from coderai.front.web.searxng import SearchFailed

log = logging.getLogger("coderai.front")

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


def failed(kind: str, tool_use_id: str, code: str = "unavailable") -> dict[str, Any]:
    """The result block of a call that could not run (by default: no backend)."""
    error = {"type": _ERROR_TYPES[kind], "error_code": code}
    return {"type": RESULT_TYPES[kind], "tool_use_id": tool_use_id, "content": error}


#: a search result's snippet, kept in its encrypted_content
SNIPPET_PREFIX = "coderai-search-v1:"


@dataclass(frozen=True)
class Limits:
    """What a request's server tool allows: its uses, and the domains it may reach."""

    max_uses: int | None = None
    allowed: list[str] | None = None
    blocked: list[str] | None = None
    #: a fetched page's characters at most (web_fetch's max_content_tokens)
    max_chars: int | None = None


#: an address in a conversation's text (up to a space, a quote or a bracket)
_URL = re.compile(r"https?://[^\s\"'<>()\[\]{}]+")


def urls_in(text: str) -> set[str]:
    """The addresses a text holds, each also without trailing punctuation."""
    found = _URL.findall(text)
    return {*found, *(u.rstrip(".,;:!?") for u in found)}


@dataclass
class Runner:
    """Runs one answer's server tool calls: through the backend, or as unavailable."""

    settings: SearchConfig
    limits: dict[str, Limits]
    #: the addresses the conversation holds: a URL to fetch must be one of them
    seen: set[str] = field(default_factory=set)
    #: the calls of each tool made so far in this turn (a paused turn's, sent back)
    uses: dict[str, int] = field(default_factory=dict)

    async def __call__(self, kind: str, arguments: str, use_id: str) -> dict[str, Any]:
        if self.settings.url is None:
            return failed(kind, use_id)
        limits = self.limits.get(kind, Limits())
        self.uses[kind] = self.uses.get(kind, 0) + 1
        if limits.max_uses is not None and self.uses[kind] > limits.max_uses:
            return failed(kind, use_id, "max_uses_exceeded")
        try:
            given = json.loads(arguments or "{}")
        except ValueError:
            given = None
        if not isinstance(given, dict):
            return failed(kind, use_id, "invalid_tool_input")
        try:
            if kind == "web_search":
                return await self._search(str(given.get("query") or ""), limits, use_id)
            return await self._fetch(str(given.get("url") or ""), limits, use_id)
        except SearchFailed as exc:
            return failed(kind, use_id, exc.code)
        except Exception:  # a failure of ours: the call is unavailable, the answer goes on
            log.exception("%s call %s failed", kind, use_id)
            return failed(kind, use_id)

    async def _search(self, query: str, limits: Limits, use_id: str) -> dict[str, Any]:
        results = await searxng.search(self.settings, query, limits.allowed, limits.blocked)
        blocks = [
            {"type": "web_search_result", "url": r.url, "title": r.title,
             "encrypted_content": seal(r.snippet, SNIPPET_PREFIX), "page_age": r.age or None}
            for r in results
        ]  # fmt: skip
        self.seen |= {r.url for r in results}  # a later fetch may follow them
        return {"type": RESULT_TYPES["web_search"], "tool_use_id": use_id, "content": blocks}

    async def _fetch(self, url: str, limits: Limits, use_id: str) -> dict[str, Any]:
        if url not in self.seen:
            raise SearchFailed("url_not_in_prior_context", "the URL is not in the conversation")

        def allowed(address: str) -> str:  # the address and each redirect's
            ok = searxng.host_allowed(address, limits.allowed, limits.blocked)
            return "" if ok else "url_not_allowed"

        fetched = await page.fetch(self.settings, url, allowed)
        text = fetched.text[: limits.max_chars] if limits.max_chars else fetched.text
        document = {"type": "document", "title": fetched.title or None,
                    "source": {"type": "text", "media_type": "text/plain",
                               "data": text}}  # fmt: skip
        content = {"type": "web_fetch_result", "url": fetched.url, "content": document,
                   "retrieved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        return {"type": RESULT_TYPES["web_fetch"], "tool_use_id": use_id, "content": content}


def what_the_model_reads(kind: str, content: Any) -> str:
    """A result block's content sent back, as the tool message's text."""
    if isinstance(content, dict) and "error_code" in content:
        code = content.get("error_code")
        return UNAVAILABLE[kind] if code == "unavailable" else f"{kind} failed: {code}"
    if isinstance(content, list):  # search results, with their snippets where ours
        return "\n\n".join(_result_text(r) for r in content if isinstance(r, dict))
    if isinstance(content, dict):  # a fetched document
        document = content.get("content")
        source = document.get("source") if isinstance(document, dict) else None
        data = source.get("data", "") if isinstance(source, dict) else ""
        return f"{content.get('url', '')}\n{data}"
    return str(content)


def _result_text(result: dict[str, Any]) -> str:
    snippet = unseal(str(result.get("encrypted_content", "")), SNIPPET_PREFIX)
    lines = (str(result.get("title", "")), str(result.get("url", "")), snippet)
    return "\n".join(line for line in lines if line)
