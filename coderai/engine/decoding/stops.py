"""Stop sequences over a stream of token texts.

A stop string can straddle tokens, so text that might be the start of one is held back
until the next token decides; nothing past the stop is ever emitted.
"""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.held = ""
        #: the stop string that ended the text, once one has
        self.matched = ""

    def feed(self, text: str) -> tuple[str, bool]:
        """Returns (text safe to emit, whether a stop string was reached)."""
        if not self.stops:
            return text, False
        buf = self.held + text
        found = [(at, stop) for stop in self.stops if (at := buf.find(stop)) >= 0]
        if found:
            cut, self.matched = min(found, key=lambda hit: hit[0])
            self.held = ""
            return buf[:cut], True
        keep = _longest_partial(buf, self.stops)
        self.held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        """Held text, released when the sequence ends for another reason."""
        out, self.held = self.held, ""
        return out


def _longest_partial(buf: str, stops: list[str]) -> int:
    """Length of the longest suffix of buf that is a proper prefix of some stop string."""
    best = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(buf)), best, -1):
            if buf.endswith(stop[:n]):
                best = n
                break
    return best
