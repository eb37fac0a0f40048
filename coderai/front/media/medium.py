"""One piece of content that is not text, as the APIs send it, in one shape: chat's
`image_url`, `input_audio` and `file` parts, Anthropic's `image` and `document` blocks and
the Responses API's `input_image` and `input_file` parts all become a Medium."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

Kind = Literal["image", "audio", "file"]


@dataclass(frozen=True)
class Medium:
    kind: Kind
    #: a `data:` URL or a remote one (an image's URL; a file's file_data or file_url)
    url: str = ""
    #: base64 without a URL around it (audio's data, Anthropic's base64 source)
    data: str = ""
    #: the media type the client declared (Anthropic's media_type; audio's format)
    mime: str = ""
    #: the file name or title the client gave
    name: str = ""
    #: an id in the API's file store (OpenAI's and Anthropic's Files APIs)
    file_id: str = ""

    def digest(self) -> str:
        """What identifies it: its content and what it is said to be (the name and type
        are part of the text the model reads)."""
        h = hashlib.sha256()
        for field in (self.kind, self.url, self.data, self.mime, self.name, self.file_id):
            h.update(field.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        return h.hexdigest()
