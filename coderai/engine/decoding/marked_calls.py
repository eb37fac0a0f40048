"""Tool calls between special-token markers, as DeepSeek-V3.1 and Kimi-K2 write them, read
as they stream.

After the section's opening marker (tool_parse.py finds it), each call is

    CALL_BEGIN name SEP arguments-JSON CALL_END

and the section ends with its closing marker:

- deepseek_v31: `tool▁calls▁begin`, then per call `tool▁call▁begin` NAME `tool▁sep` {…}
  `tool▁call▁end`, then `tool▁calls▁end`, each marker written `<` + U+FF5C + marker +
  U+FF5C + `>` (fullwidth bars);
- kimi_k2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
  <|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>` (the id
  names the function; its `functions.` prefix and `:N` index are not the name).

The arguments are JSON already: they stream as they come, less what may be the start of
the call's end marker (held until known).
"""

from __future__ import annotations

from dataclasses import dataclass

from coderai.engine.decoding.call_delta import CallDelta
from coderai.engine.decoding.marker import begun

_WHITESPACE = " \t\r\n"


@dataclass(frozen=True)
class Markers:
    section: str
    begin: str
    sep: str
    end: str
    section_end: str
    #: the id is `functions.NAME:N` (Kimi-K2), not the bare name
    kimi_ids: bool = False


MARKERS = {
    "deepseek_v31": Markers(
        "<\uff5ctool\u2581calls\u2581begin\uff5c>",
        "<\uff5ctool\u2581call\u2581begin\uff5c>",
        "<\uff5ctool\u2581sep\uff5c>",
        "<\uff5ctool\u2581call\u2581end\uff5c>",
        "<\uff5ctool\u2581calls\u2581end\uff5c>",
    ),
    "kimi_k2": Markers(
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        "<|tool_calls_section_end|>",
        kimi_ids=True,
    ),
}


def _name(raw: str, kimi_ids: bool) -> str:
    name = raw.strip(_WHITESPACE)
    if kimi_ids:
        name = name.removeprefix("functions.")
        head, colon, index = name.rpartition(":")
        if colon and index.isdigit():
            name = head
    return name


class MarkedCalls:
    """The calls of one section, fed a character at a time (as tool_parse._Body is):
    `index` counts the calls ended; `done` after the section's end (or anything that is
    not a call where one may begin)."""

    level = 2

    def __init__(self, index: int, markers: Markers) -> None:
        self.index = index
        self.m = markers
        self.done = False
        #: "between" (calls), "name", "arguments"
        self._state = "between"
        self._buffer = ""
        #: text read after the section ended without its marker, to be read again by
        #: the caller (as content)
        self.rest = ""

    def feed(self, ch: str, out: list[CallDelta]) -> None:
        self._buffer += ch
        m = self.m
        if self._state == "name":
            if self._buffer.endswith(m.sep):
                out.append(CallDelta(self.index, _name(self._buffer[: -len(m.sep)], m.kimi_ids)))
                self._buffer, self._state = "", "arguments"
            return
        if self._state == "arguments":
            if self._buffer.endswith(m.end):
                self._arguments(self._buffer[: -len(m.end)], out)
                self._buffer, self._state = "", "between"
                self.index += 1
                return
            # what cannot be the start of the end marker goes out now
            cut = self._buffer.rfind("<")
            if cut < 0 or not m.end.startswith(self._buffer[cut:]):
                cut = len(self._buffer)
            if cut:
                self._arguments(self._buffer[:cut], out)
                self._buffer = self._buffer[cut:]
            return
        head = self._buffer.lstrip(_WHITESPACE)
        if not head:
            self._buffer = ""
        elif head == m.begin:
            self._buffer, self._state = "", "name"
        elif head == m.section_end:
            self.done = True
        elif not (m.begin.startswith(head) or m.section_end.startswith(head)):
            # not a call: the section ends here, and the text is read again after it
            self.rest, self._buffer = head, ""
            self.done = True

    def _arguments(self, text: str, out: list[CallDelta]) -> None:
        if text and out and out[-1].index == self.index:
            out[-1].arguments += text
        elif text:
            out.append(CallDelta(self.index, "", text))

    def finish(self, out: list[CallDelta]) -> None:
        """The output ended inside the section: a call whose name was read ends with the
        arguments it had (as a JSON body cut off does, not closed)."""
        if self._state == "arguments":  # less an end marker begun
            text = self._buffer
            self._arguments(text[: len(text) - begun(text, self.m.end)], out)
            self.index += 1
        elif self._state == "name" and self._buffer.strip(_WHITESPACE):
            out.append(CallDelta(self.index, _name(self._buffer, self.m.kimi_ids), ""))
            self.index += 1
        self._buffer = ""
        self.done = True
