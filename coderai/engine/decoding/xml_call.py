"""One tool call in the XML style of Qwen3-Coder, Qwen3.5 and Qwen3.6, read as it streams.

Inside `<tool_call>` … `</tool_call>` (tool_parse.py finds those) the model writes

    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    …
    </function>

A VALUE is raw text, not JSON: a string as it is (over many lines, quotes unescaped), a
number or a boolean as its literal, an object or an array as JSON. The client wants the
arguments as one JSON object, so each value is typed by the tool's JSON schema for its key:
a string schema keeps the text; any other type is read as JSON where it parses, else kept
as text (the client's validation then names it). A key the schema does not know is read as
JSON where it parses (text that parses as a JSON string stays as written, quotes and all).
A boolean may be written `True` or `False`, as Python writes it (the template's `|string`).
The template writes one newline after `<parameter=KEY>` and one before `</parameter>`;
those two are not part of the value. A value ends only at `</parameter>`.

The arguments stream one parameter at a time (`{"KEY": VALUE`, `, "KEY2": VALUE2`, then
`}` at `</function>`): a value's JSON is known only once its text has ended.
"""

from __future__ import annotations

import json
import math
from typing import Any

from coderai.engine.decoding.call_delta import CallDelta
from coderai.engine.decoding.marker import begun

FUNCTION, PARAMETER = "<function=", "<parameter="
END_FUNCTION, END_PARAMETER = "</function>", "</parameter>"
_WHITESPACE = " \t\r\n"


def parameter_types(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Each tool's parameters' schemas by name: {tool: {key: schema}}."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        function = tool.get("function", tool)
        properties = (function.get("parameters") or {}).get("properties") or {}
        if isinstance(function.get("name"), str) and isinstance(properties, dict):
            out[function["name"]] = properties
    return out


def schema_types(schema: Any) -> set[str]:
    """The JSON types a schema allows (none known: a `$ref`, or no schema)."""
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    found: set[str] = set()
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key) or []:
            found |= schema_types(option)
    for value in [*(schema.get("enum") or []), *([schema["const"]] if "const" in schema else [])]:
        found.add("string" if isinstance(value, str) else _json_type(value))
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: Python reads them, JSON not


def typed(text: str, schema: Any) -> Any:
    """A parameter's value as its schema has it (see the module's docstring)."""
    kinds = schema_types(schema)
    if kinds == {"string"}:
        return text
    if "boolean" in kinds and text in ("True", "False"):
        return text == "True"  # as Python writes them: the template's `|string` does
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError:
        return text
    if isinstance(value, str) or (isinstance(value, float) and not math.isfinite(value)):
        return text  # a value is raw text: quotes written are its own; 1e999 is no number
    allowed = kinds | ({"integer"} if "number" in kinds else set())
    if "string" in kinds and _json_type(value) not in allowed:
        return text  # "1.0" where a string or a boolean is allowed: the text, as written
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "object" if isinstance(value, dict) else "array"


def _value_text(raw: str) -> str:
    """The template's newline after the opening tag and before the closing one dropped."""
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    return raw


class XmlCall:
    """The body of one call, fed a character at a time (as tool_parse._Body is): call
    deltas out as its name and parameters end; `done` after `</function>`."""

    level = 1
    #: the template writes a newline after each value's opening tag and before its end
    newlines = True

    def __init__(self, index: int, schemas: dict[str, dict[str, Any]]) -> None:
        self.index = index
        self.schemas = schemas
        self.done = False
        self.name = ""
        #: "head" (before <function=), "name", "between" (parameters), "key", "value"
        self._state = "head"
        self._buffer: list[str] = []
        self._key = ""
        self._count = 0  # parameters written
        #: the body began otherwise than `<function=`: its text so far (see feed)
        self.other: str | None = None
        #: text read after the call ended (see feed), to be read again by the caller
        self.rest = ""

    def feed(self, ch: str, out: list[CallDelta]) -> None:
        state = self._state
        if state == "value":
            self._buffer.append(ch)
            if ch == ">" and "".join(self._buffer[-len(END_PARAMETER) :]) == END_PARAMETER:
                raw = "".join(self._buffer[: -len(END_PARAMETER)])
                self._buffer = []
                self._parameter(raw, out)
                self._state = "between"
            return
        if state in ("name", "key"):
            if ch != ">":
                self._buffer.append(ch)
                return
            word = "".join(self._buffer).strip()
            self._buffer = []
            if state == "name":
                self.name = word
                out.append(CallDelta(self.index, word, ""))
                self._state = "between"
            else:
                self._key = word
                self._state = "value"
            return
        # head or between: whitespace, then a tag
        if not self._buffer and ch in _WHITESPACE:
            return
        self._buffer.append(ch)
        tag = "".join(self._buffer)
        wanted = (FUNCTION,) if state == "head" else (PARAMETER, END_FUNCTION)
        if state == "head" and not FUNCTION.startswith(tag):
            # not this format (a JSON body, as Hermes writes it): the caller reads it so
            self.other = tag
            return
        found = self._tag(tag, wanted, out)
        if found == FUNCTION:
            self._state = "name"
        elif found == PARAMETER:
            self._state = "key"
        elif found == END_FUNCTION:
            self._close(out)

    def _tag(self, head: str, wanted: tuple[str, ...], out: list[CallDelta]) -> str | None:
        """The tag `head` is, of those `wanted` where one must come next; None while it may
        still become one. Text that cannot (a closing tag left out) ends the call with the
        arguments it had, and is read again as what follows it (its closing tag, or
        content)."""
        if head in wanted:
            self._buffer = []
            return head
        if not any(w.startswith(head) for w in wanted):
            self._buffer = []
            self.rest = head
            self._close(out)
        return None

    def finish(self, out: list[CallDelta]) -> None:
        """The output ended inside the call: a value being read is taken as it stands
        (less a closing tag begun), and the arguments are closed."""
        text = "".join(self._buffer)
        if self._state == "value":
            self._parameter(text[: len(text) - begun(text, END_PARAMETER)], out)
        elif self._state == "name" and text.strip():
            self.name = text.strip()
            out.append(CallDelta(self.index, self.name, ""))
        elif self._state in ("head", "name"):
            return  # no call began
        self._buffer = []
        self._close(out)

    def _close(self, out: list[CallDelta]) -> None:
        out.append(CallDelta(self.index, "", "}" if self._count else "{}"))
        self.index += 1
        self.done = True

    def _parameter(self, raw: str, out: list[CallDelta]) -> None:
        schema = self.schemas.get(self.name, {}).get(self._key)
        value = typed(_value_text(raw) if self.newlines else raw, schema)
        piece = json.dumps(self._key) + ": " + json.dumps(value, ensure_ascii=False)
        out.append(CallDelta(self.index, "", ("{" if not self._count else ", ") + piece))
        self._count += 1
