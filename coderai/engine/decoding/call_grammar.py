"""Grammars that make a model call a tool in its own format: tool_choice "required" (one
call or more; one with parallel_tool_calls false) and a named tool (that one, once),
written as the model's chat template taught it (tool_parse.FORMATS), not in a format
foreign to it. The call parser of that format then reads the output as it would read a
call the model chose to make.

A reasoning model may think first: `<think>...</think>` (or, where its prompt opened the
block, from the first token to `</think>`), or harmony's analysis message; what it thinks
is free text, and the calls follow. Values in the XML formats (qwen3_coder, glm45) are
typed by the tool's schema: a string is free text up to its closing tag, an enum one of
its values, anything else JSON valid against its schema.

Markers the vocabulary holds as special tokens (gpt-oss's `<|channel|>`, DeepSeek's and
Kimi's call markers) are written as token references (`<[id]>`): a special token is no
text, so a string could never match it. The rest are strings. Grammars are llguidance's
Lark (coderai/common/grammar.py has the JSON-schema side).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from coderai.common.grammar import TOOL
from coderai.engine.decoding.marked_calls import MARKERS
from coderai.engine.decoding.tool_parse import CALL_TAGS
from coderai.engine.decoding.xml_call import schema_types

#: the id of a marker that is one special token of the model's vocabulary, else None
SpecialOf = Callable[[str], int | None]
#: the formats a grammar is written for (all of tool_parse.FORMATS)
OWN_FORMATS = ("hermes", "mistral", "llama3", "qwen3_coder", "glm45", *MARKERS, "harmony")
#: JSON as models write it in their calls: spaces after separators, bounded
_SPACED = {"whitespace_pattern": r"[\x20\x0A\x0D\x09]{0,12}"}
_REGEX_META = set("\\.+*?()|[]{}^$#&-~/")


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _regex(text: str) -> str:
    return "".join("\\" + ch if ch in _REGEX_META else ch for ch in text).replace("\n", "\\n")


class Mark(str):
    """A marker among the parts of `_Writer.seq` (text otherwise)."""


class _Writer:
    """Collects the rules of one grammar."""

    def __init__(self, special: SpecialOf) -> None:
        self.special = special
        self.rules: list[str] = []
        self._count = 0

    def name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def marker(self, text: str, before: str = "") -> str:
        """A marker, after some text. Text and a text marker are one string: a lexer
        that took the text alone while a longer string could still match (a parameter
        that may follow) would not go back."""
        token = self.special(text)
        if token is None:
            return _string(before + text)
        return f"{_string(before)} <[{token}]>" if before else f"<[{token}]>"

    def until(self, end: str) -> str:
        """Free text, then `end` (a marker)."""
        token = self.special(end)
        if token is not None:  # a special token cannot be in text: it ends it
            return f"/(.|\\n)*/ <[{token}]>"
        rule = self.name("text")
        self.rules.append(f"{rule}[lazy]: /(.|\\n)*{_regex(end)}/")
        return rule

    def seq(self, *parts: str) -> str:
        """Text and markers (Mark) in a row: runs of text, text markers included, are one
        string each (see `marker`); a special token's marker is its token."""
        out: list[str] = []
        text = ""
        for part in parts:
            token = self.special(part) if isinstance(part, Mark) else None
            if token is None:
                text += part
                continue
            if text:
                out.append(_string(text))
                text = ""
            out.append(f"<[{token}]>")
        if text:
            out.append(_string(text))
        return " ".join(out)

    def json(self, schema: dict[str, Any]) -> str:
        return f"%json {json.dumps({**schema, 'x-guidance': {**_SPACED, **TOOL}})}"


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    params = tool.get("function", {}).get("parameters")
    return params if isinstance(params, dict) else {"type": "object"}


def _resolved(schema: Any, params: dict[str, Any]) -> Any:
    """A parameter's schema with its local `$ref` followed (a few deep)."""
    for _ in range(8):
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not isinstance(ref, str):
            return schema
        for root in ("#/$defs/", "#/definitions/"):
            if ref.startswith(root):
                target = (params.get(root[2:-1]) or {}).get(ref[len(root) :])
                break
        else:
            return schema
        if not isinstance(target, dict):
            return schema
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _value(w: _Writer, schema: Any, params: dict[str, Any], fmt: str) -> str:
    """A parameter's value in an XML format, and its closing tag. A schema that allows a
    string (or says nothing of its type) is free text: the parser keeps text as written
    where a string is allowed, so quotes would stay in the value."""
    closing = "</parameter>" if fmt == "qwen3_coder" else "</arg_value>"
    after = "\n" if fmt == "qwen3_coder" else ""  # Qwen writes a newline either side
    schema = _resolved(schema, params)
    choices = None
    if isinstance(schema, dict):
        choices = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if isinstance(choices, list) and choices and all(isinstance(c, str) for c in choices):
        options = "(" + " | ".join(_string(c) for c in choices) + ")"
        return f"{options} {w.seq(after, Mark(closing), after)}"
    kinds = schema_types(schema)
    if not kinds or "string" in kinds or not isinstance(schema, dict):
        # the value ends at the first closing tag, as the parser ends it
        text = w.until(closing)
        return f"{text} {w.seq(after)}" if after else text
    roots = {k: params[k] for k in ("$defs", "definitions") if isinstance(params.get(k), dict)}
    return f"{w.json({**schema, **roots})} {w.seq(after, Mark(closing), after)}"


def _xml_call(w: _Writer, tool: dict[str, Any], fmt: str, opened: bool = False) -> str:
    """One call of a tool in qwen3_coder's or glm45's markup (`opened`: from after its
    opening tag, which the model already wrote)."""
    name = tool["function"]["name"]
    params = _parameters(tool)
    properties = params.get("properties")
    required = params.get("required")
    required = set(required) if isinstance(required, list) else set()
    parts: list[str] = []
    if isinstance(properties, dict):
        for key, schema in properties.items():
            if fmt == "qwen3_coder":
                head = w.seq(f"<parameter={key}>\n")
            else:
                head = w.seq("\n", Mark("<arg_key>"), key, Mark("</arg_key>"), "\n",
                             Mark("<arg_value>"))  # fmt: skip
            part = f"{head} {_value(w, schema, params, fmt)}"
            parts.append(f"({part})" if key in required else f"({part})?")
    else:  # no schema of its parameters: any, as text
        key_rule = w.name("key")
        w.rules.append(f"{key_rule}: /[^>\\n<]+/")
        if fmt == "qwen3_coder":
            text = f'{w.until("</parameter>")} "\\n"'
            parts.append(f'("<parameter=" {key_rule} ">\\n" {text})*')
        else:
            opening = w.seq("\n", Mark("<arg_key>"))
            middle = w.seq(Mark("</arg_key>"), "\n", Mark("<arg_value>"))
            parts.append(f"({opening} {key_rule} {middle} {w.until('</arg_value>')})*")
    body = " ".join(parts)
    newline = "\n"
    opening = "" if opened else w.marker("<tool_call>")
    if fmt == "qwen3_coder":
        function = _string(f"{newline}<function={name}>{newline}")
        close = w.seq(f"</function>{newline}", Mark("</tool_call>"))
        return f"{opening} {function} {body} {close}".strip()
    close = w.seq(newline, Mark("</tool_call>"))
    return f"{opening} {_string(name)} {body} {close}".strip()


def _json_call(w: _Writer, tools: list[dict[str, Any]], key: str) -> str:
    from coderai.common.grammar import call_schema

    return w.json(call_schema(tools, key))


def _one_call(
    w: _Writer, tools: list[dict[str, Any]], fmt: str, tags: tuple[str, str] = CALL_TAGS
) -> str:
    """A rule for one call of any of the tools, in the format's markup."""
    rule = w.name("call")
    if fmt == "hermes":
        body = f'{w.marker(tags[0])} "\\n" {_json_call(w, tools, "arguments")} '
        body += w.marker(tags[1], "\n")
    elif fmt == "llama3":
        body = _json_call(w, tools, "parameters")
    elif fmt in ("qwen3_coder", "glm45"):
        body = " | ".join(f"({_xml_call(w, tool, fmt)})" for tool in tools)
    elif fmt in MARKERS:
        m = MARKERS[fmt]
        options = []
        for tool in tools:
            name = tool["function"]["name"]
            label = f"functions.{name}:" if fmt == "kimi_k2" else name
            index = " /[0-9]{1,3}/" if fmt == "kimi_k2" else ""
            options.append(f"({w.marker(m.begin)} {_string(label)}{index} {w.marker(m.sep)} "
                           f"{w.json(_parameters(tool))} {w.marker(m.end)})")  # fmt: skip
        body = " | ".join(options)
    elif fmt == "harmony":
        options = [
            f"({_string(' to=functions.' + t['function']['name'] + ' ')} "
            f'{w.marker("<|constrain|>")} "json" {w.marker("<|message|>")} '
            f"{w.json(_parameters(t))} {w.marker('<|call|>')})"
            for t in tools
        ]
        body = f'{w.marker("<|channel|>")} "commentary" (' + " | ".join(options) + ")"
    else:
        raise ValueError(f"no grammar for the call format {fmt!r}")
    w.rules.append(f"{rule}: {body}")
    return rule


def own_grammar(
    tools: list[dict[str, Any]],
    fmt: str,
    special: SpecialOf,
    parallel: bool = True,
    think: str = "",
    call_tags: tuple[str, str] = CALL_TAGS,
    think_tags: tuple[str, str] = ("<think>", "</think>"),
) -> str:
    """Lark text: the output is the model's reasoning, if it reasons (`think`: "think",
    "opened" where its prompt opened the block, "harmony", or ""), then one call of one of
    `tools` in format `fmt`, or several (`parallel`; harmony's turn holds one)."""
    w = _Writer(special)
    if fmt == "mistral":  # one array of calls
        from coderai.common.grammar import call_schema, with_defs

        one = call_schema(tools)
        items = {k: v for k, v in one.items() if k != "$defs"}
        array = with_defs({"type": "array", "items": items, "minItems": 1}, one)
        if not parallel:
            array["maxItems"] = 1
        return _start(w, f"{w.marker('[TOOL_CALLS]')} {w.json(array)}", think, think_tags)
    call = _one_call(w, tools, fmt, call_tags)
    if fmt in MARKERS:  # one section, its calls inside
        m = MARKERS[fmt]
        many = f"{call}+" if parallel else call
        calls = f"{w.marker(m.section)} {many} {w.marker(m.section_end)}"
    elif parallel and fmt != "harmony":
        separator = '"; "' if fmt == "llama3" else '"\\n"'
        calls = f"{call} ({separator} {call})*"
    else:
        calls = call
    return _start(w, calls, think, think_tags)


def _start(w: _Writer, calls: str, think: str, tags: tuple[str, str]) -> str:
    start = calls
    if think == "think":
        start = f"({w.marker(tags[0])} {w.until(tags[1])} /[ \\t\\r\\n]{{0,4}}/)? {calls}"
    elif think == "opened":
        start = f"{w.until(tags[1])} /[ \\t\\r\\n]{{0,4}}/ {calls}"
    elif think == "harmony":
        analysis = (f'{w.marker("<|channel|>")} "analysis" {w.marker("<|message|>")} '
                    f'{w.until("<|end|>")} {w.marker("<|start|>")} "assistant"')  # fmt: skip
        start = f"({analysis})? {calls}"
    return "\n".join([f"start: {start}", *w.rules]) + "\n"


#: the formats whose calls a lazy grammar of their own finishes (a call the model began
#: with tool_choice auto; the JSON formats' lazy grammar is coderai/common/grammar.py's)
LAZY_OWN = ("qwen3_coder", "glm45", *MARKERS)


def lazy_own_grammar(
    tools: list[dict[str, Any]], fmt: str, special: SpecialOf, parallel: bool = True
) -> str:
    """Lark text: the rest of a call the model began in an XML or marked format, from
    after its opening marker (`<tool_call>`, or the section's), to its end (a section's:
    several calls where parallel calls are allowed)."""
    w = _Writer(special)
    if fmt in ("qwen3_coder", "glm45"):
        options = " | ".join(f"({_xml_call(w, tool, fmt, opened=True)})" for tool in tools)
        return "\n".join([f"start: {options}", *w.rules]) + "\n"
    call = _one_call(w, tools, fmt)
    start = f"{call}{'+' if parallel else ''} {w.marker(MARKERS[fmt].section_end)}"
    return "\n".join([f"start: {start}", *w.rules]) + "\n"
