"""The raw bytes of one token of a Hugging Face tokenizer, for logprobs' `bytes` field.

Decoding a single token as text loses what the field is for: a token holding part of a
multi-byte character decodes to U+FFFD, and SentencePiece drops a leading space. So the
token's own string is mapped back to bytes: byte-level BPE (GPT-2, SmolLM2, Llama 3, Qwen)
spells each byte as one printable character, SentencePiece spells a space as "▁" and a raw
byte as "<0xNN>".
"""

from __future__ import annotations

import json
import re
from typing import Any

_RAW_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_level_table() -> dict[str, int]:
    """Byte-level BPE's alphabet: printable Latin-1 bytes stand for themselves, the others
    (controls, space, and a few more) for the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


_BYTE_LEVEL = _byte_level_table()


class TokenBytes:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        decoder = None
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:
            decoder = (json.loads(backend.to_str()).get("decoder") or {}).get("type")
        self.byte_level = decoder == "ByteLevel"

    def __call__(self, token: int) -> bytes:
        piece = self.tokenizer.convert_ids_to_tokens(token)
        if not isinstance(piece, str):
            return b""
        if self.byte_level and all(c in _BYTE_LEVEL for c in piece):
            return bytes(_BYTE_LEVEL[c] for c in piece)
        raw = _RAW_BYTE.fullmatch(piece)
        if raw:
            return bytes([int(raw.group(1), 16)])
        return piece.replace("▁", " ").encode()
