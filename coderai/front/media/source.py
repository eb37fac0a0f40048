"""A medium's bytes, from a `data:` URL or bare base64. Remote URLs are not fetched here:
a model that reads no images needs no bytes to be told there was one."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes


@dataclass(frozen=True)
class Bytes:
    raw: bytes
    #: the media type the URL declared ("" if none)
    mime: str


class Unreadable(ValueError):
    """Content that does not decode: named in the placeholder, never a failed request."""


def is_data_url(url: str) -> bool:
    return url[:5].lower() == "data:"


def decoded(url: str = "", data: str = "", mime: str = "") -> Bytes:
    """The bytes of a `data:` URL (RFC 2397: base64 or percent-encoded), or of bare
    base64 with the declared media type."""
    if url:
        if not is_data_url(url):
            raise Unreadable("not a data: URL")
        head, comma, body = url[5:].partition(",")
        if not comma:
            raise Unreadable("a data: URL without a comma")
        params = head.split(";")
        declared = params[0].strip().lower()
        if "base64" in (p.strip().lower() for p in params[1:]):
            return Bytes(_base64(body), declared)
        return Bytes(unquote_to_bytes(body), declared)
    return Bytes(_base64(data), mime.lower())


def _base64(text: str) -> bytes:
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise Unreadable("its base64 does not decode") from None
