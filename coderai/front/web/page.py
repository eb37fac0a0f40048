"""A web page or document fetched by the front for web_fetch: http(s) only, within the
config's time and byte limits; HTML read as its text (the standard library's parser:
scripts and styles left out, blocks on lines of their own), a PDF as its text layer
(pypdf, as documents in requests are), plain text as it is."""

from __future__ import annotations

import html
import io
from dataclasses import dataclass
from html.parser import HTMLParser

import aiohttp

from coderai.config import SearchConfig
from coderai.front.media.document import NotADocument, is_text_type, pdf_text
from coderai.front.web.searxng import SearchFailed

#: tags whose text is no part of the page's
_HIDDEN = {"script", "style", "noscript", "template", "svg", "head"}
#: tags that end a line
_BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
           "section", "article", "header", "footer", "table", "ul", "ol", "blockquote"}  # fmt: skip


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
        self._in_title = tag == "title"
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


async def fetch(settings: SearchConfig, url: str) -> Page:
    """The page's text, or SearchFailed with Anthropic's web_fetch error code."""
    if not url.lower().startswith(("http://", "https://")):
        raise SearchFailed("invalid_tool_input", "only http and https URLs are fetched")
    if len(url) > 2000:
        raise SearchFailed("url_too_long", "the URL is over 2,000 characters")
    timeout = aiohttp.ClientTimeout(total=settings.timeout_seconds)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url, max_redirects=5) as response,
        ):
            if response.status != 200:
                raise SearchFailed("url_not_accessible", f"the page answered {response.status}")
            raw = await response.content.read(settings.fetch_max_bytes)
            mime = response.content_type or ""
            charset = response.charset or "utf-8"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise SearchFailed("url_not_accessible", f"the page cannot be fetched: {exc}") from None
    title, text = "", ""
    if mime == "application/pdf" or raw[:5] == b"%PDF-":
        try:
            document = pdf_text(raw)
        except NotADocument as exc:
            raise SearchFailed("unsupported_content_type", str(exc)) from None
        title, text = document.title, document.text
    elif mime in ("text/html", "application/xhtml+xml"):
        title, text = html_text(raw.decode(charset, errors="replace"))
    elif is_text_type(mime) or not mime:
        text = io.TextIOWrapper(io.BytesIO(raw), encoding=charset, errors="replace").read()
    else:
        raise SearchFailed("unsupported_content_type", f"{mime} is not read")
    return Page(str(response.url), title, text[: settings.fetch_max_chars])
