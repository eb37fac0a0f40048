"""A document's text: a PDF's text layer with pypdf, a text file as itself.

pypdf rather than pdfminer.six: it is pure Python with no dependencies (pdfminer.six pulls
in charset-normalizer and cryptography), it is actively kept, and a PDF's text in reading
order is all that is asked; pdfminer's finer layout analysis costs several times the
time for a prompt that does not need it."""

from __future__ import annotations

import io
import logging
import warnings
from dataclasses import dataclass

#: media types read as text as they are (besides text/*)
TEXT_TYPES = ("application/json", "application/xml", "application/x-yaml", "application/yaml",
              "application/javascript", "application/x-sh", "application/toml")  # fmt: skip


@dataclass(frozen=True)
class DocumentText:
    #: the text ("" when it has none: a scanned PDF)
    text: str
    #: its pages (0 for a file that has none)
    pages: int = 0
    #: the title its metadata gives ("" if none)
    title: str = ""


class NotADocument(ValueError):
    """Bytes that are not a document this server reads, saying why."""


def is_text_type(mime: str) -> bool:
    return mime.startswith("text/") or mime in TEXT_TYPES


def pdf_text(raw: bytes) -> DocumentText:
    """A PDF's text, page after page (blank lines between), with its page count."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its notes on odd files, per page
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader = PdfReader(io.BytesIO(raw))
            if reader.is_encrypted and not reader.decrypt(""):
                raise NotADocument("it is encrypted")
            pages = [(page.extract_text() or "").strip() for page in reader.pages]
            title = str(reader.metadata.get("/Title") or "").strip() if reader.metadata else ""
    except NotADocument:
        raise
    except (PdfReadError, RecursionError, Exception) as exc:  # a malformed file: any of pypdf's
        # own errors, or Python's from a structure it did not expect
        raise NotADocument(f"it cannot be read as a PDF ({str(exc)[:80]})") from None
    text = "\n\n".join(p for p in pages if p)
    return DocumentText(text, len(pages), title)


def plain_text(raw: bytes) -> DocumentText:
    return DocumentText(raw.decode("utf-8", errors="replace"))
