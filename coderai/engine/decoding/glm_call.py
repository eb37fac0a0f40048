"""One tool call in GLM-4.5's and GLM-4.6's format, read as it streams.

Inside `<tool_call>` (tool_parse.py finds it) the model writes the tool's name, then its
arguments as key and value tags, and closes the call itself:

    <tool_call>NAME
    <arg_key>KEY</arg_key>
    <arg_value>VALUE</arg_value>
    …
    </tool_call>

A VALUE is raw text where the argument is a string, else its JSON (the template writes
`tojson` for anything but a string): typed by the tool's schema as Qwen3-Coder's values are
(xml_call.typed). The arguments stream one pair at a time.
"""

from __future__ import annotations

from coderai.engine.decoding.call_delta import CallDelta
from coderai.engine.decoding.marker import begun
from coderai.engine.decoding.xml_call import XmlCall

KEY, END_KEY = "<arg_key>", "</arg_key>"
VALUE, END_VALUE = "<arg_value>", "</arg_value>"
END_CALL = "</tool_call>"
_WHITESPACE = " \t\r\n"


class GlmCall(XmlCall):
    """The body of one call (the parts shared with Qwen3-Coder's are XmlCall's): its
    name up to the line's end or the first tag; `done` after `</tool_call>`."""

    newlines = False

    def feed(self, ch: str, out: list[CallDelta]) -> None:
        state = self._state
        self._buffer.append(ch)
        if state in ("key", "value"):  # a value may be long: only a `>` may end it
            end = END_KEY if state == "key" else END_VALUE
            if ch != ">" or "".join(self._buffer[-len(end) :]) != end:
                return
            word, self._buffer = "".join(self._buffer[: -len(end)]), []
            if state == "key":
                self._key, self._state = word.strip(_WHITESPACE), "before value"
            else:
                self._parameter(word, out)
                self._state = "between"
            return
        text = "".join(self._buffer)  # a name or a tag: short
        if state == "head":  # the name, up to the end of its line or a tag
            if text.strip(_WHITESPACE) == "" and ch in _WHITESPACE:
                self._buffer = []
                return
            if text.lstrip(_WHITESPACE).startswith("{"):
                self.other = text  # a JSON body, as Hermes writes it: the caller reads it
                return
            if ch == "\n" or text.endswith(("<", END_CALL)):
                self._named(text, out)
            return
        # between tags: whitespace, then the one expected
        if not text.strip(_WHITESPACE):
            self._buffer = []
            return
        head = text.lstrip(_WHITESPACE)
        wanted = (VALUE,) if state == "before value" else (KEY, END_CALL)
        found = self._tag(head, wanted, out)
        if found == KEY:
            self._state = "key"
        elif found == VALUE:
            self._state = "value"
        elif found == END_CALL:
            self._close(out)

    def _named(self, text: str, out: list[CallDelta]) -> None:
        """The name is read: what ended it (a tag's first character, or the whole
        `</tool_call>` of a call without arguments) is read as the next state's."""
        tail = END_CALL if text.endswith(END_CALL) else ("<" if text.endswith("<") else "")
        self.name = text[: len(text) - len(tail)].strip(_WHITESPACE)
        out.append(CallDelta(self.index, self.name, ""))
        self._buffer, self._state = [], "between"
        if tail == END_CALL:
            self._close(out)
        elif tail:
            self.feed(tail, out)

    def finish(self, out: list[CallDelta]) -> None:
        """The output ended inside the call: a value being read is taken as it stands
        (less a closing tag begun), and the arguments are closed."""
        text = "".join(self._buffer)
        if self._state == "head":
            if not text.strip(_WHITESPACE):
                return  # no call began
            self._named(text, out)
            if self.done:
                return
        elif self._state == "value":
            self._parameter(text[: len(text) - begun(text, END_VALUE)], out)
        self._buffer = []
        self._close(out)
