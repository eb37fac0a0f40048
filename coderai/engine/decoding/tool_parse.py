"""Tool calls out of a completion's text, as it streams.

A model writes a call in its own format; the parser turns what it reads into content (text
for the user) and call deltas (index, name, a fragment of the arguments' JSON), so the
front can stream OpenAI's `delta.tool_calls` without ever showing a call as content.

Formats (the body of a call is a JSON object {"name": ..., "arguments": {...}}):
- hermes: `<tool_call>BODY</tool_call>`, repeated (Hermes, Qwen 2/2.5/3, and our fallback);
- qwen3_coder: `<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function>
  </tool_call>`, repeated (Qwen3-Coder, Qwen3.5, Qwen3.6; read by xml_call.py);
- glm45: `<tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>...
  </tool_call>`, repeated (GLM-4.5, GLM-4.6; read by glm_call.py);
- deepseek_v31 and kimi_k2: a section of calls between special-token markers, each a
  name and its JSON arguments (read by marked_calls.py);
- mistral: `[TOOL_CALLS][BODY, BODY, ...]`;
- llama3: the output starts with BODY (key "parameters"), after an optional
  `<|python_tag|>`; several are separated by `;`;
- calls (tool_choice "required", under a grammar): the whole output is `[BODY, ...]`;
- arguments (a named tool_choice, under a grammar): the whole output is the arguments.

A body is read by a small JSON scanner that knows strings, escapes and depth, so a `}` or
`,` inside a string never ends a value. Text that may be the start of a marker is held
back until it is known not to be one (as stop sequences are).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from coderai.engine.decoding.call_delta import CallDelta
from coderai.engine.decoding.glm_call import GlmCall
from coderai.engine.decoding.marked_calls import MARKERS, MarkedCalls
from coderai.engine.decoding.marker import begun
from coderai.engine.decoding.xml_call import XmlCall, parameter_types

#: every call format a model may write; harmony's is read by harmony.py, with its reasoning
FORMATS = ("hermes", "mistral", "llama3", "qwen3_coder", "glm45", *MARKERS, "harmony")
#: the tags of a Hermes call (and of Qwen3-Coder's and GLM's XML ones)
CALL_TAGS = ("<tool_call>", "</tool_call>")
#: the formats whose calls are in <tool_call></tool_call> tags
_TAGGED = ("hermes", "qwen3_coder", "glm45")
#: the formats whose values are raw text, typed by the tools' schemas
_TYPED = ("qwen3_coder", "glm45")
#: the keys a body's arguments may be under
_ARGUMENT_KEYS = ("arguments", "parameters")
_WHITESPACE = " \t\r\n"


@dataclass
class Parsed:
    """What one piece of text turned into."""

    content: str = ""
    calls: list[CallDelta] = field(default_factory=list)
    #: reasoning (only a reader of a format whose channels carry it: harmony.py)
    reasoning: str = ""
    #: a call body began: the text of it read so far (a lazy grammar starts from here)
    began: str | None = None


class _Body:
    """Scans one call body: the arguments alone (level 0), a JSON object (level 1) or an
    array of them (level 2). Only the call object's own keys are parsed; the arguments'
    JSON is passed on as it is, with its strings and depth tracked to find its end."""

    def __init__(self, index: int, level: int, fixed_name: str = "") -> None:
        self.level = level
        self.index = index
        self.depth = 0
        #: a string of the call object itself (a key or the name), and its raw text
        self.in_string = False
        self.escape = False
        self.raw: list[str] = []
        #: the key whose value comes next, and what is being read: "key", "name",
        #: "arguments", "skip" (another key's value) or None
        self.key: str | None = None
        self.reading: str | None = None
        #: inside the arguments: their depth and string state
        self.args_depth = 0
        self.args_string = False
        self.args_escape = False
        self.name = fixed_name
        self.named = False
        self.pending: list[str] = []  # arguments read before the name
        self.done = False

    def feed(self, ch: str, out: list[CallDelta]) -> None:
        if self.level == 0 or self.reading == "arguments":
            self._arguments(ch, out)
            return
        if self.in_string:
            self._string(ch, out)
            return
        if ch == '"':
            self.in_string, self.raw = True, []
            if self.depth == self.level and self.key is None:
                self.reading = "key"
        elif ch == ":" and self.depth == self.level and self.key is not None:
            self.reading = {"name": "name"}.get(self.key, "skip")
            if self.key in _ARGUMENT_KEYS:
                self.reading = "arguments"
        elif ch == "," and self.depth == self.level:
            self.key, self.reading = None, None
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            if self.depth == self.level - 1:  # a call object closed
                self._close_call(out)
            if self.depth <= 0:
                self.done = True

    def _string(self, ch: str, out: list[CallDelta]) -> None:
        if self.escape:
            self.escape = False
            self.raw.append(ch)
            return
        if ch == "\\":
            self.escape = True
            self.raw.append(ch)
            return
        if ch != '"':
            self.raw.append(ch)
            return
        self.in_string = False
        if self.depth != self.level:
            return
        text = _unescape("".join(self.raw))
        if self.reading == "key":
            self.key, self.reading = text, None
        elif self.reading == "name":
            self.name, self.reading, self.named = text, "skip", True
            out.append(CallDelta(self.index, self.name, "".join(self.pending)))
            self.pending = []

    def _arguments(self, ch: str, out: list[CallDelta]) -> None:
        if self.args_string:
            if self.args_escape:
                self.args_escape = False
            elif ch == "\\":
                self.args_escape = True
            elif ch == '"':
                self.args_string = False
        elif ch == '"':
            self.args_string = True
        elif ch in "{[":
            self.args_depth += 1
        elif ch in "}]" or (ch == "," and self.args_depth == 0):
            if self.args_depth == 0:  # the value ended: the call object goes on
                if self.level == 0:
                    self.done = True
                    return
                self.reading = None
                self.feed(ch, out)
                return
            self.args_depth -= 1
            if self.args_depth == 0 and self.level == 0:
                self._emit(ch, out)
                self.done = True
                return
        elif self.args_depth == 0 and ch in _WHITESPACE:
            return  # around a value: not part of it
        self._emit(ch, out)

    def _emit(self, ch: str, out: list[CallDelta]) -> None:
        if self.level == 0 and not self.named:
            out.append(CallDelta(self.index, self.name, ""))
            self.named = True
        if not self.named:  # arguments before the name: held until the name is known
            self.pending.append(ch)
        elif out and out[-1].index == self.index:
            out[-1].arguments += ch
        else:
            out.append(CallDelta(self.index, "", ch))

    def _close_call(self, out: list[CallDelta]) -> None:
        if not self.named:  # a call without a name still ends as one (the client sees it)
            out.append(CallDelta(self.index, self.name, "".join(self.pending)))
        self.index += 1
        self.key, self.reading, self.named, self.name = None, None, False, ""
        self.pending = []


def _unescape(raw: str) -> str:
    try:
        value = json.loads(f'"{raw}"')
    except ValueError:
        return raw
    if not isinstance(value, str):
        return raw
    # an escaped lone surrogate ("\\ud800") cannot cross the bus as UTF-8
    return value.encode("utf-8", "replace").decode("utf-8")


class ToolCallParser:
    """Feed it a completion's text in pieces; it says what is content and what is a call."""

    def __init__(
        self,
        mode: str,
        fmt: str = "hermes",
        name: str = "",
        single: bool = False,
        tools: list[dict[str, Any]] | None = None,
        tags: tuple[str, str] = CALL_TAGS,
    ) -> None:
        #: "auto" (the model's own format), "calls" (required) or "arguments" (named)
        self.mode = mode
        self.format = fmt
        #: the tags a Hermes-like call is between (a family's own: template_probe.py)
        self.open, self.close = tags if fmt == "hermes" else CALL_TAGS
        #: a format whose values are not JSON types them by the tools' schemas
        self._schemas = parameter_types(tools) if fmt in _TYPED else {}
        #: parallel_tool_calls false: the output ends with its first call
        self.single = single
        #: calls ended, and whether any call began (the finish reason is then tool_calls)
        self.calls = 0
        self.called = False
        self._held = ""
        self._started = False  # any non-whitespace seen (llama3 calls start the output)
        self._body: _Body | XmlCall | MarkedCalls | None = None
        self._after = False  # a hermes body ended: its closing tag may follow
        if mode == "calls":
            self._body = _Body(0, 2)
        elif mode == "arguments":
            self._body = _Body(0, 0, name)

    @property
    def done(self) -> bool:
        """Nothing more is to be read: a single call has ended."""
        return self.single and self.calls >= 1

    @property
    def in_call(self) -> bool:
        return self._body is not None

    #: what it reads is never reasoning (a splitter took that out before it)
    thinking = False

    def feed(self, text: str) -> Parsed:
        out = Parsed()
        data = self._held + text
        self._held = ""
        i = 0
        began: int | None = None
        while i < len(data):
            if self._body is not None:
                self._body.feed(data[i], out.calls)
                i += 1
                if isinstance(self._body, XmlCall) and self._body.other is not None:
                    # a JSON body inside the XML format's tags: read as Hermes writes it
                    other, self._body = self._body.other, _Body(self.calls, 1)
                    for ch in other:
                        self._body.feed(ch, out.calls)
                if self._body.level == 2:  # calls of an array end one by one
                    self.calls = self._body.index
                if self.done:  # what follows a single call is not read
                    self._body = None
                    break
                if self._body.done:
                    self.calls = self._body.index if self._body.level else 1
                    rest = self._body.rest if isinstance(self._body, XmlCall | MarkedCalls) else ""
                    self._body = None
                    self._after = self.format in _TAGGED and self.mode == "auto"
                    if self.done:
                        break
                    if rest:  # what ended an XML call is read again, after it
                        data, i, began = rest + data[i:], 0, None
                continue
            i = self._outside(data, i, out)
            if i < 0:  # a possible marker prefix: held
                break
            if self._body is not None and began is None:
                began = i
        if began is not None:
            out.began = data[began:]
        self.called = self.called or bool(out.calls)
        return out

    def _outside(self, data: str, i: int, out: Parsed) -> int:
        """Content (auto mode only): find a call's start; returns the next index, or -1
        when the rest is held."""
        if self.mode != "auto":
            return len(data)  # text after a constrained call: nothing more is expected
        rest = data[i:]
        if self._after:
            stripped = rest.lstrip(_WHITESPACE)
            if not stripped:
                self._held = rest
                return -1
            close = self.close
            if close.startswith(stripped[: len(close)]):
                if len(stripped) < len(close):
                    self._held = rest
                    return -1
                self._after = False
                return i + (len(rest) - len(stripped)) + len(close)
            self._after = False
        if self.format == "llama3":
            return self._llama3(data, i, out)
        if self.format in MARKERS:
            marker = MARKERS[self.format].section
        else:
            marker = self.open if self.format in _TAGGED else "[TOOL_CALLS]"
        if self.calls:  # whitespace between calls, or after the last, is not content
            head = rest.lstrip(_WHITESPACE)
            if not head or (marker.startswith(head) and len(head) < len(marker)):
                self._held = rest
                return -1
            if head.startswith(marker):
                rest, i = head, len(data) - len(head)
        at = rest.find(marker)
        if at >= 0:
            out.content += rest[:at]
            self._begin(out, 1 if self.format in _TAGGED else 2)
            return i + at + len(marker)
        keep = begun(rest, marker)  # a tail that could grow into the marker is held
        if keep:
            out.content += rest[:-keep]
            self._held = rest[-keep:]
            return -1
        out.content += rest
        return len(data)

    def _llama3(self, data: str, i: int, out: Parsed) -> int:
        """A call starts the output (or follows a call): whitespace, an optional
        `<|python_tag|>`, then `{`; anything else makes the rest content."""
        rest = data[i:]
        if self._started and not self.calls:
            out.content += rest
            return len(data)
        tag = "<|python_tag|>"
        head = rest.lstrip(_WHITESPACE + ";")
        if head.startswith(tag):
            head = head[len(tag) :].lstrip(_WHITESPACE)
        if not head or (tag.startswith(head) and len(head) < len(tag)):
            self._held = rest  # not yet known
            return -1
        if head.startswith("{"):  # a call only if its first key is "name"
            key = head[1:].lstrip(_WHITESPACE)
            if len(key) < len('"name"') and '"name"'.startswith(key):
                self._held = rest
                return -1
            if key.startswith('"name"'):
                self._started = True
                self._begin(out, 1)
                return len(data) - len(head)
        self._started = True
        out.content += rest if not self.calls else head
        return len(data)

    def _begin(self, out: Parsed, level: int) -> None:
        if self.format == "qwen3_coder":
            self._body = XmlCall(self.calls, self._schemas)
            return
        if self.format == "glm45":
            self._body = GlmCall(self.calls, self._schemas)
            return
        if self.format in MARKERS:
            self._body = MarkedCalls(self.calls, MARKERS[self.format])
            return
        self._body = _Body(self.calls, level)

    def finish(self) -> Parsed:
        """The end of the text: what was held is content (a marker that never finished)."""
        held = self._held
        out = Parsed(content="" if self._after or (self.calls and not held.strip()) else held)
        self._held = ""
        if isinstance(self._body, XmlCall | MarkedCalls):
            # an XML call's arguments are closed (a JSON body's, as a marked one's, not)
            self._body.finish(out.calls)
            self.calls, self._body = self._body.index, None
            self.called = self.called or bool(out.calls)
        return out
