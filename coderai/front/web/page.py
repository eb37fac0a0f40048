"""A web page or document fetched by the front for web_fetch: http(s) only, within the
config's time and byte limits; HTML read as its visible text (the standard library's
parser: scripts and styles left out, blocks on lines of their own), a PDF as its text
layer (pypdf, as documents in requests are), plain text as it is.

The front fetches from its own host, so an address must not reach what the host can and
the user cannot: unless the config's `search.fetch_private` allows it, every address a
name resolves to must be public (the connector's resolver refuses loopback, private,
link-local and reserved ones, on the very lookup the connection uses, so a name that
resolves differently the second time gains nothing), and redirects are followed here,
each hop checked again by the caller's rule (`allowed`)."""

from __future__ import annotations

import asyncio
import errno
import html
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from coderai.config import SearchConfig
from coderai.front.media.document import NotADocument, is_text_type, pdf_text
from coderai.front.web.searxng import SearchFailed

#: tags whose text is no part of the page's
_HIDDEN = {"script", "style", "noscript", "template", "svg"}
#: tags that end a line
_BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
           "section", "article", "header", "footer", "table", "ul", "ol", "blockquote"}  # fmt: skip
#: redirects followed at most
REDIRECTS = 5


@dataclass(frozen=True)
class Page:
    url: str
    title: str
    text: str


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._hidden = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self._hidden += 1
        # the page's title, not an svg's (an icon's <title> is hidden with its svg)
        self._in_title = tag == "title" and not self._hidden
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN and self._hidden:
            self._hidden -= 1
        if tag == "title":
            self._in_title = False
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._hidden:
            self.parts.append(data)


def html_text(markup: str) -> tuple[str, str]:
    """(title, text) of an HTML page: its visible text, a line per block, spaces squeezed."""
    parser = _Text()
    parser.feed(markup)
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return html.unescape(parser.title.strip()), "\n".join(line for line in lines if line)


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    return ip.is_global and not ip.is_multicast


class PublicResolver(AbstractResolver):
    """The system's lookup, refusing a name any of whose addresses is not public."""

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: Any = 0) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        if not all(is_public(r["host"]) for r in found):
            # an errno with its words: aiohttp's connection error quotes the words
            raise OSError(errno.EACCES, f"{host} resolves to an address that is not public")
        return found

    async def close(self) -> None:
        await self._inner.close()


def _text_of(raw: bytes, mime: str, charset: str) -> tuple[str, str]:
    """(title, text) of a fetched body, or SearchFailed (in a worker thread: a PDF or a
    large page takes a while)."""
    if mime == "application/pdf" or raw[:5] == b"%PDF-":
        try:
            document = pdf_text(raw)
        except NotADocument as exc:
            raise SearchFailed("unsupported_content_type", str(exc)) from None
        return document.title, document.text
    try:
        decoded = raw.decode(charset, errors="replace")
    except LookupError:  # a charset no codec knows
        decoded = raw.decode("utf-8", errors="replace")
    if mime in ("text/html", "application/xhtml+xml"):
        return html_text(decoded)
    if is_text_type(mime) or not mime:
        return "", decoded
    raise SearchFailed("unsupported_content_type", f"{mime} is not read")


async def fetch(settings: SearchConfig, url: str, allowed: Callable[[str], str]) -> Page:
    """The page's text, or SearchFailed with Anthropic's web_fetch error code. `allowed`
    names what rules out an address ("" when nothing does): the first, and every
    redirect's."""
    timeout = aiohttp.ClientTimeout(total=settings.timeout_seconds)
    resolver = None if settings.fetch_private else PublicResolver()
    connector = aiohttp.TCPConnector(resolver=resolver)
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            response = await checked_redirects(session, url, settings.fetch_private, allowed)
            async with response:
                if response.status != 200:
                    why = f"the page answered {response.status}"
                    raise SearchFailed("url_not_accessible", why)
                raw = await body(response, settings.fetch_max_bytes)
                mime, charset = response.content_type or "", response.charset or "utf-8"
                url = str(response.url)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        raise SearchFailed("url_not_accessible", f"the page cannot be fetched: {exc}") from None
    title, text = await asyncio.to_thread(_text_of, raw, mime, charset)
    return Page(url, title, text[: settings.fetch_max_chars])


async def checked_redirects(
    session: aiohttp.ClientSession,
    url: str,
    private_ok: bool,
    allowed: Callable[[str], str] = lambda _url: "",
) -> aiohttp.ClientResponse:
    """The answer at `url`, its redirects followed here and each address checked first
    (_check); SearchFailed for one that may not be reached, or past REDIRECTS."""
    for _ in range(REDIRECTS + 1):
        _check(url, allowed, private_ok)
        response = await session.get(url, allow_redirects=False)
        if response.status not in (301, 302, 303, 307, 308):
            return response
        location = response.headers.get("Location", "")
        response.release()
        url = urljoin(url, location)
    raise SearchFailed("url_not_accessible", f"over {REDIRECTS} redirects")


def _check(url: str, allowed: Callable[[str], str], private_ok: bool) -> None:
    if not url.lower().startswith(("http://", "https://")):
        raise SearchFailed("invalid_tool_input", "only http and https URLs are fetched")
    if len(url) > 2000:
        raise SearchFailed("url_too_long", "the URL is over 2,000 characters")
    # an address given as an IP is not looked up, so the resolver never sees it
    host = urlsplit(url).hostname or ""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None and not private_ok and not is_public(host):
        raise SearchFailed("url_not_accessible", f"{host} is an address that is not public")
    why = allowed(url)
    if why:
        raise SearchFailed(why, f"{url[:200]} may not be fetched")


async def body(response: aiohttp.ClientResponse, most: int) -> bytes:
    """The body, up to `most` bytes (the rest is not read)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        chunks.append(chunk[: most - size])
        size += len(chunks[-1])
        if size >= most:
            break
    return b"".join(chunks)
