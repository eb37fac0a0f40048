"""Incremental detokenization: text for each new token, never half a character.

Decoding one token at a time breaks multi-byte characters and merges that span tokens, so
the text of the tokens so far is decoded against a trailing window and only the part past
what was already emitted is released, unless it ends in U+FFFD (an incomplete sequence).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: tokens of context decoded before the new ones, so merges at the boundary come out right
_WINDOW = 6


class IncrementalDetokenizer:
    def __init__(self, decode: Callable[[Sequence[int]], str]) -> None:
        self._decode = decode
        self.ids: list[int] = []
        self._prefix = 0  # start of the decoding window
        self._read = 0  # tokens whose text has been emitted

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self._read = len(self.ids)
        self._prefix = max(0, self._read - _WINDOW)
        return after[len(before) :]
