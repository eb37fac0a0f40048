"""What the model reads in a medium's place, decided once per content (cached by its
hash: an agent resends the same screenshot every turn, and the text must come out the
same each time for the prompt's prefix to stay cached).

- An image, for a model that reads none: `[image: image/png, 1280x720, not shown: this
  model reads no images]`; from a remote URL, the URL in the type's place (it is not
  fetched: a model that reads no images has no use for its bytes).
- Audio: `[audio: wav, not heard: this model reads no audio]`.
- A PDF: its text under a line naming it (`[document: report.pdf, 3 pages]`); one with no
  text layer (a scan), or one that cannot be read, a placeholder saying so.
- A text file: its text, under its name.
- Any other file, and a file by id (no file store here): a placeholder naming it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock

from coderai.front.media.document import NotADocument, is_text_type, pdf_text, plain_text
from coderai.front.media.image import image_facts
from coderai.front.media.medium import Medium
from coderai.front.media.source import Bytes, Unreadable, decoded, is_data_url

log = logging.getLogger("coderai.front")

NO_IMAGES = "this model reads no images"
#: how long a URL or name may be where it is quoted (a data: URL is never quoted)
_QUOTED = 200


@dataclass(frozen=True)
class Shown:
    #: what the model reads in its place
    text: str
    #: what it was and what became of it, for the response's header and the log
    what: str


def _quoted(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _QUOTED else text[: _QUOTED - 1] + "…"


def _placeholder(kind: str, facts: list[str], why: str) -> str:
    return f"[{kind}: {', '.join([*facts, why])}]"


def _image(medium: Medium) -> Shown:
    if medium.file_id:
        return _by_id(medium)
    if medium.url and not is_data_url(medium.url):
        where = _quoted(medium.url)
        return Shown(_placeholder("image", [where], f"not shown: {NO_IMAGES}"), f"image {where}")
    try:
        content = decoded(medium.url, medium.data, medium.mime)
    except Unreadable as exc:
        return Shown(_placeholder("image", [], f"not shown: {exc}"), "image (unreadable)")
    facts = image_facts(content.raw)
    if facts is None:
        why = "not shown: its bytes are not an image this server can read"
        return Shown(_placeholder("image", [content.mime or "?"], why), "image (unreadable)")
    described = [facts.mime, f"{facts.width}x{facts.height}"]
    return Shown(_placeholder("image", described, f"not shown: {NO_IMAGES}"),
                 f"image {' '.join(described)}")  # fmt: skip


def _audio(medium: Medium) -> Shown:
    fmt = _quoted(medium.mime) or "audio"
    return Shown(_placeholder("audio", [fmt], "not heard: this model reads no audio"),
                 f"audio {fmt}")  # fmt: skip


def _by_id(medium: Medium) -> Shown:
    ref = _quoted(medium.file_id)
    why = "not shown: this server keeps no uploaded files (send its content instead)"
    return Shown(_placeholder(medium.kind, [ref], why), f"{medium.kind} {ref}")


def _file(medium: Medium) -> Shown:
    if medium.file_id:
        return _by_id(medium)
    name = _quoted(medium.name)
    if medium.url and not is_data_url(medium.url) and not medium.data:
        where = _quoted(medium.url)
        why = "not read: this server fetches no remote files"
        return Shown(_placeholder("document", [name or where], why), f"file {where}")
    try:
        content = decoded(medium.url, medium.data, medium.mime)
    except Unreadable as exc:
        return Shown(_placeholder("document", [name], f"not read: {exc}"), f"file {name}")
    return _document(content, name)


def _document(content: Bytes, name: str) -> Shown:
    mime = content.mime or ("application/pdf" if content.raw[:5] == b"%PDF-" else "")
    if mime == "application/pdf":
        try:
            pdf = pdf_text(content.raw)
        except NotADocument as exc:
            why = f"not read: {exc}"
            return Shown(_placeholder("document", [name or "PDF"], why), f"PDF {name} (unreadable)")
        label = name or _quoted(pdf.title) or "PDF"
        pages = f"{pdf.pages} page{'s' if pdf.pages != 1 else ''}"
        if not pdf.text:
            why = "not shown: it has no text layer (a scan?) and this model reads no images"
            text = _placeholder("document", [label, "application/pdf", pages], why)
            return Shown(text, f"PDF {label} (no text layer)")
        return Shown(f"[document: {label}, {pages}]\n{pdf.text}\n[end of document]",
                     f"PDF {label} (as text)")  # fmt: skip
    if is_text_type(mime) or (not mime and _looks_textual(content.raw)):
        label = name or "text"
        return Shown(f"[document: {label}]\n{plain_text(content.raw).text}\n[end of document]",
                     f"{mime or 'text'} {label} (as text)")  # fmt: skip
    why = "not read: this server reads PDFs and text files only"
    return Shown(_placeholder("document", [name or "file", mime or "?"], why), f"file {name}")


def _looks_textual(raw: bytes) -> bool:
    try:
        raw[:4096].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in raw[:4096]


def _decide(medium: Medium) -> Shown:
    if medium.kind == "image":
        return _image(medium)
    if medium.kind == "audio":
        return _audio(medium)
    return _file(medium)


class _Cache:
    """Shown texts by content hash, the most recent kept (a session's media, resent), as
    many as `size` and no more than `chars` characters of text in all (a document's text
    may be long)."""

    def __init__(self, size: int, chars: int) -> None:
        self.size = size
        self.chars = chars
        self.held = 0
        self.items: OrderedDict[str, Shown] = OrderedDict()
        self.lock = Lock()  # filled from worker threads (read_media) and the event loop

    def get(self, key: str) -> Shown | None:
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
            return found

    def put(self, key: str, shown: Shown) -> None:
        with self.lock:
            if key in self.items:
                self.held -= len(self.items.pop(key).text)
            self.items[key] = shown
            self.held += len(shown.text)
            while self.items and (len(self.items) > self.size or self.held > self.chars):
                self.held -= len(self.items.popitem(last=False)[1].text)


#: 512 media, 16 million characters of text (some 64 MiB at most)
_CACHE = _Cache(512, 16_000_000)


def cached(medium: Medium) -> Shown | None:
    return _CACHE.get(medium.digest())


def show(medium: Medium) -> Shown:
    """What the model reads in the medium's place (cached by its content)."""
    key = medium.digest()
    found = _CACHE.get(key)
    if found is None:
        found = _decide(medium)
        _CACHE.put(key, found)
        # once per content (a session resends it every turn); what it is, never what it says
        log.info("a request's %s is read as %d characters of text", found.what, len(found.text))
    return found


@dataclass(frozen=True)
class Seen:
    """An image a model with a vision projector reads: its bytes, and what it was."""

    raw: bytes
    what: str


def seen(medium: Medium) -> Seen | None:
    """An image's bytes for a model that reads images, where they are in the request (a
    `data:` URL or base64) and are an image; None otherwise (a remote URL, which the front
    does not fetch, or bytes that are no image: the placeholder goes in its place)."""
    if medium.kind != "image" or medium.file_id:
        return None
    if medium.url and not is_data_url(medium.url):
        return None
    try:
        content = decoded(medium.url, medium.data, medium.mime)
    except Unreadable:
        return None
    facts = image_facts(content.raw)
    if facts is None:
        return None
    raw = content.raw
    if facts.mime not in _DECODED:  # llama.cpp's decoder reads these; others go as PNG
        raw = as_png(raw)
    return Seen(raw, f"image {facts.mime} {facts.width}x{facts.height} (shown)")


#: the image types llama.cpp's own decoder (stb_image) reads
_DECODED = ("image/png", "image/jpeg", "image/gif", "image/bmp")


def as_png(raw: bytes) -> bytes:
    """An image of another type (WebP, TIFF) as PNG."""
    import io

    from PIL import Image

    out = io.BytesIO()
    with Image.open(io.BytesIO(raw)) as image:
        image.convert("RGB").save(out, "PNG")
    return out.getvalue()
