"""A search through SearXNG's JSON API (`GET /search?q=...&format=json`), the self-hosted
metasearch engine users run: its results' titles, addresses, snippets and dates, filtered
by the domains a request allows or blocks, the first `max_results` kept."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from coderai.config import SearchConfig


@dataclass(frozen=True)
class Result:
    url: str
    title: str
    snippet: str
    #: when it was published, as the engine says it ("" if it does not)
    age: str = ""


class SearchFailed(Exception):
    """The search could not run: its error code, as Anthropic's result error names it."""

    def __init__(self, code: str, why: str) -> None:
        super().__init__(why)
        self.code = code


def _host_matches(url: str, domains: list[str]) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return any(host == d.lower() or host.endswith("." + d.lower()) for d in domains)


def host_allowed(url: str, allowed: list[str] | None, blocked: list[str] | None) -> bool:
    """Whether an address is within `allowed` (if given) and outside `blocked`."""
    return (not allowed or _host_matches(url, allowed)) and not (
        blocked and _host_matches(url, blocked)
    )


def kept(results: list[Result], allowed: list[str] | None, blocked: list[str] | None,
         most: int) -> list[Result]:  # fmt: skip
    """The results a request may see, in order, at most `most`."""
    return [r for r in results if host_allowed(r.url, allowed, blocked)][:most]


async def search(
    settings: SearchConfig, query: str, allowed: list[str] | None, blocked: list[str] | None
) -> list[Result]:
    """The results of one query, or SearchFailed."""
    assert settings.url is not None
    if not query.strip():
        raise SearchFailed("invalid_tool_input", "the query is empty")
    if len(query) > 2000:
        raise SearchFailed("query_too_long", "the query is over 2,000 characters")
    timeout = aiohttp.ClientTimeout(total=settings.timeout_seconds)
    params = {"q": query, "format": "json"}
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(settings.url.rstrip("/") + "/search", params=params) as response,
        ):
            if response.status == 429:
                raise SearchFailed("too_many_requests", "the search engine is rate limited")
            if response.status != 200:
                raise SearchFailed("unavailable", f"the search engine answered {response.status}")
            body = await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise SearchFailed("unavailable", f"the search engine cannot be reached: {exc}") from None
    found = body.get("results") if isinstance(body, dict) else None
    results = [
        Result(str(r["url"]), str(r.get("title") or r["url"]), str(r.get("content") or ""),
               str(r.get("publishedDate") or ""))
        for r in found or [] if isinstance(r, dict) and isinstance(r.get("url"), str)
    ]  # fmt: skip
    return kept(results, allowed, blocked, settings.max_results)
