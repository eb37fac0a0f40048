"""Where streamed text may be the start of a marker (a call's or a block's tag), to be
held back until the next piece tells: one rule for every reader in this package."""

from __future__ import annotations


def begun(text: str, marker: str) -> int:
    """The length of the longest end of `text` that could grow into `marker` (0: none).
    The whole marker is not counted: a reader looks for that itself."""
    for keep in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-keep:]):
            return keep
    return 0
