"""Grammars for constrained decoding, built from a job: llguidance's JSON-schema and Lark
front ends, which both backends share. The front checks a request's schemas with them
before any engine sees it; the rest of structured output is the engine's, in
engine/decoding/: structured.py (one sequence's grammar, parser and log-probabilities),
constraint.py (a grammar applied to logits), call_grammar.py (a call in the model's own
format).

llguidance was chosen over xgrammar because it needs no torch (the front checks schemas
with it, and the front never imports torch), ships one abi3 wheel, builds a tokenizer from
either a Hugging Face tokenizer or a llama.cpp vocabulary, and is what llama.cpp's and
vLLM's own grammar support use. Its mask costs about 70 µs a token on SmolLM2's 49k
vocabulary here (bench/constrained.py measures the whole cost).

Constraints that hold from the first token (a response_format; tool_choice "required" or
a named tool where no grammar of the model's own call format can be built: engine/
decoding/call_grammar.py writes those) use compact JSON: a small model under a grammar
that allows free whitespace can spend its whole budget on newlines. A call the model
starts on its own (tool_choice "auto") is constrained lazily, from where it began, and
has already chosen its spacing, so its grammar allows a little whitespace between
tokens.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: JSON with no whitespace between tokens
_COMPACT = {"whitespace_flexible": False}
#: a model's own spacing, bounded so that it cannot loop on whitespace
_SPACED = {"whitespace_pattern": r"[\x20\x0A\x0D\x09]{0,12}"}
#: a tool's schema is enforced as far as llguidance can, and a keyword it does not
#: implement (`propertyNames`, `if`/`then`, `not`, `dependentRequired`: common in MCP
#: servers' tools) is skipped rather than failing the request: the arguments the model
#: writes against that part are returned as written, and the client validates them
#: (`unenforced` names what was skipped)
TOOL = {"lenient": True}


class GrammarError(ValueError):
    """A schema the grammar engine cannot compile; the message names the construct."""


def _tool_parameters(tool: dict[str, Any]) -> dict[str, Any]:
    params = tool.get("function", {}).get("parameters")
    return params if isinstance(params, dict) else {"type": "object"}


def _rewrite(node: Any, refs: dict[str, str]) -> Any:
    """A copy of a schema with its local references renamed."""
    if isinstance(node, dict):
        return {
            k: refs.get(v, v) if k == "$ref" and isinstance(v, str) else _rewrite(v, refs)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rewrite(v, refs) for v in node]
    return node


def _hoisted(tool: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameters with its definitions moved into `defs` under names of its own:
    nested inside a call object, `#/$defs/X` would no longer point at them (pydantic puts
    every model a schema uses there)."""
    params = dict(_tool_parameters(tool))
    name = tool["function"]["name"]
    local = {**params.pop("definitions", {}), **params.pop("$defs", {})}
    refs = {}
    for key in local:
        refs[f"#/$defs/{key}"] = refs[f"#/definitions/{key}"] = f"#/$defs/{name}.{key}"
    for key, schema in local.items():
        defs[f"{name}.{key}"] = _rewrite(schema, refs)
    return _rewrite(params, refs) if refs else params


def call_schema(tools: list[dict[str, Any]], key: str = "arguments") -> dict[str, Any]:
    """One call of any of the tools: {"name": <a tool's name>, key: <its arguments>}, with
    every tool's definitions at its root (`with_defs` moves them to an outer root)."""
    defs: dict[str, Any] = {}
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["function"]["name"]},
                key: _hoisted(tool, defs),
            },
            "required": ["name", key],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    return {**schema, "$defs": defs} if defs else schema


def with_defs(outer: dict[str, Any], inner: dict[str, Any]) -> dict[str, Any]:
    """`outer` wrapping `inner` (a call schema), with the definitions moved to the root."""
    defs = inner.get("$defs")
    return {**outer, "$defs": defs} if defs else outer


def _schema_grammar(schema: dict[str, Any], options: Any) -> str:
    import llguidance

    try:
        return str(llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=options))
    except ValueError as exc:
        raise GrammarError(str(exc)) from None


def _lark(lark: str) -> str:
    import llguidance

    return str(llguidance.LLMatcher.grammar_from_lark(lark))


def lark_grammar(lark: str) -> str:
    """A grammar from llguidance's Lark text (engine/decoding/call_grammar.py writes it)."""
    return _lark(lark)


def response_grammar(response_format: dict[str, Any]) -> str:
    """A whole output that is a JSON object, or one valid against a schema."""
    if response_format.get("type") == "json_object":
        return _schema_grammar({"type": "object"}, _COMPACT)
    strict = bool(response_format.get("strict"))
    # strict: every keyword must be enforced, or the schema is refused; otherwise what the
    # engine does not implement is skipped, as OpenAI's non-strict mode promises less
    options = {**_COMPACT, "lenient": not strict}
    return _schema_grammar(response_format.get("schema") or {"type": "object"}, options)


def required_grammar(tools: list[dict[str, Any]], parallel: bool) -> str:
    """tool_choice "required": the output is an array of calls, at least one."""
    call = call_schema(tools)
    items = {k: v for k, v in call.items() if k != "$defs"}
    schema: dict[str, Any] = with_defs({"type": "array", "items": items, "minItems": 1}, call)
    if not parallel:
        schema["maxItems"] = 1
    return _schema_grammar(schema, {**_COMPACT, **TOOL})


def named_grammar(tool: dict[str, Any]) -> str:
    """A named tool_choice: the output is that tool's arguments."""
    return _schema_grammar(_tool_parameters(tool), {**_COMPACT, **TOOL})


#: the call formats a lazy grammar is built for: their bodies are JSON
LAZY_FORMATS = ("hermes", "mistral", "llama3")


def lazy_grammar(tools: list[dict[str, Any]], fmt: str) -> str:
    """The rest of a call the model began in its own format (tool_parse.FORMATS), from the
    start of its body; what follows the body is left to the model."""
    key = "parameters" if fmt == "llama3" else "arguments"
    call = call_schema(tools, key)
    if fmt == "mistral":
        items = {k: v for k, v in call.items() if k != "$defs"}
        call = with_defs({"type": "array", "items": items, "minItems": 1}, call)
    call = {**call, "x-guidance": {**_SPACED, **TOOL}}
    return _lark(f"start: /[ \\t\\r\\n]*/ call\ncall: %json {json.dumps(call)}")


def check(grammar: str) -> list[str]:
    """Refuse a grammar llguidance cannot build (it names what it does not implement);
    a lenient one that builds gives the schema keywords it skipped, in order, once each."""
    import llguidance

    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar)
    if failed:
        raise GrammarError("; ".join(messages))
    return skipped(messages)


#: how llguidance names the keywords a lenient schema left unenforced
_UNIMPLEMENTED = re.compile(r"Unimplemented keys: (\[[^\]]*\])")


def skipped(warnings: list[str]) -> list[str]:
    """The schema keywords llguidance's warnings say it skipped (a warning of another
    kind is kept whole, so that nothing it said is lost)."""
    keys: list[str] = []
    for warning in warnings:
        found = _UNIMPLEMENTED.findall(warning)
        names = [k for group in found for k in json.loads(group)] if found else [warning]
        keys += [k for k in names if k not in keys]
    return keys
