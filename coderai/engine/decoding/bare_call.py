"""Calls a coding model writes without their tags: the whole answer one JSON object
`{"name": ..., "arguments": {...}}`, bare or in one ```json fence.

Qwen2.5-Coder (0.5B to 32B) often answers a request with tools that way instead of in
`<tool_call>` tags, and agents then show the JSON and do nothing (ollama/ollama#12174,
openai/codex#2229, …). Where tools were offered and tool_choice is not "none", an answer
that is exactly one such object, naming an offered tool with arguments its schema accepts,
is returned as that call. Anything else stays text: an answer that explains JSON, an
object with other keys, a tool not offered, arguments the schema refuses, two objects,
text around it.

Streaming: content is held back only while the text can still become such an answer (from
its first character: whitespace, an opening fence, then the object); the first character
that rules it out lets everything held go as content. Because the arguments must be
checked whole, a recovered call is sent when the answer ends, as one delta.

A model entry's `bare_tool_calls: false` turns it off.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from coderai.engine.decoding.call_delta import CallDelta
from coderai.engine.decoding.tool_parse import Parsed, ToolCallParser

log = logging.getLogger("coderai.engine")

_WHITESPACE = " \t\r\n"
#: the keys a bare call's object may have (the arguments under either name)
_KEYS = frozenset({"name", "arguments", "parameters"})
#: a fence's longest opening line that is still read ("```json", "```tool_call", …)
_FENCE_LINE = 24


class BareCallScanner:
    """Whether a text seen so far can still be one bare call (incremental, one pass): one
    object after whitespace and an optional fence, whose own keys are a call's and whose
    name is an offered tool's (when `names` are given), then only whitespace and the
    fence's close."""

    def __init__(self, names: frozenset[str] | None = None) -> None:
        self._names = names
        #: inside the object at its own level: a key comes next (after `{` or `,`), and
        #: the text of the string being read there (a key, or the name's value)
        self._expect_key = False
        self._key = ""
        self._own: list[str] | None = None
        #: lead (whitespace before), fence (its opening line), object, after, dead
        self.state = "lead"
        self.fenced = False
        self._line = ""
        self._depth = 0
        self._string = False
        self._escape = False
        self._closing = ""  # the closing fence read so far
        self.start = -1  # where the object begins in the text fed
        self.end = -1  # just past its closing brace
        self._at = 0

    @property
    def alive(self) -> bool:
        return self.state != "dead"

    def feed(self, text: str) -> bool:
        """Read more; False once the text cannot be a bare call."""
        for ch in text:
            self._char(ch)
            self._at += 1
            if self.state == "dead":
                return False
        return True

    def _char(self, ch: str) -> None:
        state = self.state
        if state == "object":
            self._json(ch)
        elif state == "lead":
            if ch == "{":
                self.state, self._depth, self.start = "object", 1, self._at
                self._expect_key = True
            elif ch == "`" and not self.fenced:
                self.state, self._line = "fence", ch
            elif ch not in _WHITESPACE:
                self.state = "dead"
        elif state == "fence":
            self._line += ch
            if ch == "\n":
                lang = self._line.strip().removeprefix("```")
                ok = self._line.startswith("```") and (not lang or lang.isidentifier())
                self.state, self.fenced = ("lead", True) if ok else ("dead", False)
            elif len(self._line) > _FENCE_LINE or not "```".startswith(self._line[:3]):
                self.state = "dead"
        elif state == "after":
            if ch in _WHITESPACE and self._closing in ("", "```"):
                return
            if self.fenced and ch == "`" and len(self._closing) < 3:
                self._closing += ch
                return
            self.state = "dead"

    def _json(self, ch: str) -> None:
        if self._string:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._string = False
                if self._own is not None:
                    self._own_string("".join(self._own))
                    self._own = None
                return
            if self._own is not None:
                self._own.append(ch)
        elif ch == '"':
            self._string = True
            reading_own = self._depth == 1 and (self._expect_key or self._key == "name")
            self._own = [] if reading_own else None
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            if self._depth == 0:
                self.state, self.end = "after", self._at + 1
        elif self._depth == 1 and ch == ":":
            self._expect_key = False
        elif self._depth == 1 and ch == ",":
            self._expect_key, self._key = True, ""

    def _own_string(self, text: str) -> None:
        """A key of the object, or the name's value: either can rule a call out (the
        raw text: a key or a tool name written with escapes is not expected)."""
        if self._expect_key:
            self._key = text
            if text not in _KEYS:
                self.state = "dead"
        elif self._names is not None and text not in self._names:
            self.state = "dead"

    def whole(self) -> bool:
        """At the end of the answer: it was one object (and a fence around it, closed or
        cut off by the end)."""
        return self.state == "after" and self._closing in ("", "```")


def recovered(text: str, tools: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The (name, arguments JSON) of a bare call whose object is `text`, if it names an
    offered tool and its arguments are an object the tool's schema accepts."""
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if not isinstance(call, dict) or not set(call) <= _KEYS or "name" not in call:
        return None
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):  # some write the arguments as OpenAI sends them
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    schema = _schema_of(tools, call["name"])
    if schema is None or not _accepts(schema, arguments):
        return None
    return str(call["name"]), json.dumps(arguments, ensure_ascii=False)


def _schema_of(tools: list[dict[str, Any]], name: object) -> dict[str, Any] | None:
    for tool in tools:
        function = tool.get("function", {}) if isinstance(tool, dict) else {}
        if isinstance(function, dict) and function.get("name") == name:
            parameters = function.get("parameters")
            return parameters if isinstance(parameters, dict) else {}
    return None


def _names(tools: list[dict[str, Any]]) -> frozenset[str]:
    return frozenset(
        str(t["function"].get("name"))
        for t in tools
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    )


def _accepts(schema: dict[str, Any], arguments: dict[str, Any]) -> bool:
    """Whether the arguments are valid by the tool's schema. A schema the validator
    cannot use (a `$ref` it cannot resolve, a keyword it cannot read) checks nothing:
    such an answer stays text, never a call no schema vouched for."""
    import jsonschema

    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError:
        return False
    except Exception as exc:
        log.info("a tool's schema cannot check a call written without tags (%s): text", exc)
        return False
    return True


class BareCallReader:
    """A ToolCallParser in auto mode, with bare calls recovered (the same interface)."""

    def __init__(self, inner: ToolCallParser, tools: list[dict[str, Any]]) -> None:
        self.inner = inner
        self._tools = tools
        self._scanner: BareCallScanner | None = BareCallScanner(_names(tools))
        self._held: list[str] = []
        self._recovered = False

    # what the scheduler and structured.py read of a parser
    mode = "auto"
    thinking = False

    @property
    def done(self) -> bool:
        return self.inner.done

    @property
    def in_call(self) -> bool:
        return self.inner.in_call

    @property
    def called(self) -> bool:
        return self.inner.called or self._recovered

    @property
    def calls(self) -> int:
        return self.inner.calls + self._recovered

    def feed(self, text: str) -> Parsed:
        return self._watch(self.inner.feed(text))

    def _watch(self, out: Parsed) -> Parsed:
        if self._scanner is None:
            return out
        if out.calls or self.inner.in_call:  # the model's own format: no bare call
            return self._release(out)
        if out.content:
            if not self._scanner.feed(out.content):
                return self._release(out)
            self._held.append(out.content)
            out.content = ""
        return out

    def _release(self, out: Parsed) -> Parsed:
        """The text cannot be a bare call: what was held goes out first, as content."""
        out.content = "".join(self._held) + out.content
        self._held, self._scanner = [], None
        return out

    def finish(self) -> Parsed:
        out = self._watch(self.inner.finish())
        scanner, self._scanner = self._scanner, None
        if scanner is None:
            return out
        held, self._held = "".join(self._held), []
        call = (
            recovered(held[scanner.start : scanner.end], self._tools) if scanner.whole() else None
        )
        if call is None:
            out.content = held + out.content
            return out
        self._recovered = True
        out.calls.append(CallDelta(self.inner.calls, call[0], call[1]))
        return out
