"""gpt-oss's output, read as it streams: OpenAI's harmony format.

The model writes messages, each a header then a body:
`<|channel|>analysis<|message|>thinking...<|end|>` and, after
`<|start|>assistant`, more of them. The channel says what the body is:
- `analysis`: reasoning (the client's `reasoning_content`, thinking blocks, reasoning
  items);
- `final`, and `commentary` addressed to nobody (a preamble the user may read): content;
- any message addressed to a function (`to=functions.NAME`, after the role or after the
  channel, often with `<|constrain|>json`): a call of NAME whose body is its arguments'
  JSON, streamed as call deltas as it is written. The prompt ends with
  `<|start|>assistant`, so a first message addressed after its role begins ` to=`. A
  message to one of gpt-oss's built-in tools (`browser.search`, `python`), which were
  never offered, is no call: it is read by its channel.
A body ends at `<|end|>`, `<|call|>` or `<|return|>` (the last two end the turn: a backend
stops there on its own, since they are end-of-generation tokens). Output that does not
begin as a header (a model whose template was misread) is content throughout.

One reader does what the `<think>` splitter and the call parser do for other models,
because here the channel decides both; it answers the call parser's questions (`called`,
`calls`, `done`) and tells whether the text now being written is reasoning (`thinking`).
"""

from __future__ import annotations

import re

from coderai.engine.decoding.call_delta import CallDelta
from coderai.engine.decoding.marker import begun
from coderai.engine.decoding.tool_parse import Parsed

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
#: a header longer than this is not one: what was held is content
_LONGEST_HEADER = 512
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_FUNCTIONS = "functions."
#: the prompt ends with `<|start|>assistant`: a first message addressed after its role
#: begins with the recipient
_ADDRESSED = "to="
_WHITESPACE = " \t\r\n"


def _header_kind(header: str, calls: bool) -> tuple[str, str]:
    """(kind, tool name) of a message from its header: "reasoning", "content" or
    "call". Only a function is called: a message to one of gpt-oss's built-in tools
    (`browser.search`, `python`), which were never offered, is read by its channel."""
    found = _RECIPIENT.search(header)
    if found is not None and found.group(1).startswith(_FUNCTIONS) and calls:
        return "call", found.group(1).removeprefix(_FUNCTIONS)
    channel = header.split(CHANNEL, 1)[1] if CHANNEL in header else ""
    name = channel.strip(_WHITESPACE).split(" ", 1)[0].split("<|", 1)[0]
    return ("reasoning" if name == "analysis" else "content"), ""


def _may_be_header(text: str, first: bool = False) -> bool:
    """Whether text read where a header is due can still be one (the output's first may
    open with its recipient)."""
    head = text.lstrip(_WHITESPACE)
    for opening in (START, CHANNEL, _ADDRESSED) if first else (START, CHANNEL):
        if head.startswith(opening) or opening.startswith(head):
            return len(head) <= _LONGEST_HEADER
    return False


class HarmonyReader:
    """Feed it the output's text in pieces; it says what is reasoning, content and calls.
    With `calls` false (no tools offered, or tool_choice none) a message to a tool is
    content."""

    def __init__(self, calls: bool = True, single: bool = False) -> None:
        #: whether a message to a function is a call (tools were offered)
        self.offers_calls = calls
        #: parallel_tool_calls false: the output ends with its first call
        self.single = single
        #: "header" (a message's header is due) or "body"; "plain" once the output is
        #: known not to be harmony's
        self.state = "header"
        self.kind = ""
        self._held = ""
        self.calls = 0
        self.called = False
        #: which kinds were written already (a second message of one is set apart)
        self._written: set[str] = set()
        self._opened = False  # a message began

    @property
    def thinking(self) -> bool:
        """Whether the text now being written is reasoning."""
        return self.state == "body" and self.kind == "reasoning"

    @property
    def done(self) -> bool:
        return self.single and self.calls >= 1

    @property
    def in_call(self) -> bool:
        return self.state == "body" and self.kind == "call"

    def feed(self, text: str) -> Parsed:
        out = Parsed()
        data, self._held = self._held + text, ""
        while data and not self.done:
            if self.state == "plain":
                out.content += data
                break
            if self.state == "header":
                first = not self._opened
                at = data.find(MESSAGE)
                if at < 0 or not _may_be_header(data[:at], first):
                    if _may_be_header(data, first):
                        self._held = data  # not yet known
                        break
                    self.state = "plain"  # not harmony's: all of it is content
                    continue
                self._open(data[:at], out)
                data = data[at + len(MESSAGE) :]
                continue
            data = self._body(data, out)
        return out

    def _open(self, header: str, out: Parsed) -> None:
        self._opened = True
        self.kind, name = _header_kind(header, self.offers_calls)
        self.state = "body"
        if self.kind == "call":
            self.called = True
            out.calls.append(CallDelta(self.calls, name, ""))
        elif self.kind in self._written:  # a second message of its kind: a new paragraph
            self._put("\n\n", out)

    def _body(self, data: str, out: Parsed) -> str:
        """Read a body up to its end marker; returns what follows that marker."""
        ends = [(at, marker) for marker in ENDS if (at := data.find(marker)) >= 0]
        if not ends:
            keep = max(begun(data, marker) for marker in ENDS)
            self._put(data[: len(data) - keep], out)
            self._held = data[len(data) - keep :]
            return ""
        at, marker = min(ends)
        self._put(data[:at], out)
        self._close()
        return data[at + len(marker) :]

    def _put(self, text: str, out: Parsed) -> None:
        if not text:
            return
        self._written.add(self.kind)
        if self.kind == "reasoning":
            out.reasoning += text
        elif self.kind == "content":
            out.content += text
        elif out.calls and out.calls[-1].index == self.calls:
            out.calls[-1].arguments += text
        else:
            out.calls.append(CallDelta(self.calls, "", text))

    def _close(self) -> None:
        if self.kind == "call":
            self.calls += 1
        self.state, self.kind = "header", ""

    def finish(self) -> Parsed:
        """The end of the output: a body's held text is what it was; a header left
        unfinished is dropped; an open call ends (its end marker is the backend's stop)."""
        out = Parsed()
        held, self._held = self._held, ""
        if self.state == "body":
            self._put(held, out)
            self._close()
        elif self.state == "plain" or not _may_be_header(held, not self._opened):
            out.content = held
        return out
