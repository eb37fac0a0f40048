"""Grammars for constrained decoding, built from a job: llguidance's JSON-schema and Lark
front ends, which both backends share (engine/constraint.py applies them to logits).

llguidance was chosen over xgrammar because it needs no torch (the front checks schemas
with it, and the front never imports torch), ships one abi3 wheel, builds a tokenizer from
either a Hugging Face tokenizer or a llama.cpp vocabulary, and is what llama.cpp's and
vLLM's own grammar support use. Its mask costs about 70 µs a token on SmolLM2's 49k
vocabulary here (bench/constrained.py measures the whole cost).

Constraints that hold from the first token (a response_format, tool_choice "required" or a
named tool) use compact JSON: a small model under a grammar that allows free whitespace
can spend its whole budget on newlines. A call the model starts on its own (tool_choice
"auto") is constrained lazily, from where it began, and has already chosen its spacing, so
its grammar allows a little whitespace between tokens.
"""

from __future__ import annotations

import json
from typing import Any

#: JSON with no whitespace between tokens
_COMPACT = {"whitespace_flexible": False}
#: a model's own spacing, bounded so that it cannot loop on whitespace
_SPACED = {"whitespace_pattern": r"[\x20\x0A\x0D\x09]{0,12}"}


class GrammarError(ValueError):
    """A schema the grammar engine cannot compile; the message names the construct."""


def _tool_parameters(tool: dict[str, Any]) -> dict[str, Any]:
    params = tool.get("function", {}).get("parameters")
    return params if isinstance(params, dict) else {"type": "object"}


def call_schema(tools: list[dict[str, Any]], key: str = "arguments") -> dict[str, Any]:
    """One call of any of the tools: {"name": <a tool's name>, key: <its arguments>}."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["function"]["name"]},
                key: _tool_parameters(tool),
            },
            "required": ["name", key],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def _schema_grammar(schema: dict[str, Any], options: Any) -> str:
    import llguidance

    try:
        return str(llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=options))
    except ValueError as exc:
        raise GrammarError(str(exc)) from None


def _lark(lark: str) -> str:
    import llguidance

    return str(llguidance.LLMatcher.grammar_from_lark(lark))


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
    schema: dict[str, Any] = {"type": "array", "items": call_schema(tools), "minItems": 1}
    if not parallel:
        schema["maxItems"] = 1
    return _schema_grammar(schema, _COMPACT)


def named_grammar(tool: dict[str, Any]) -> str:
    """A named tool_choice: the output is that tool's arguments."""
    return _schema_grammar(_tool_parameters(tool), _COMPACT)


def lazy_grammar(tools: list[dict[str, Any]], fmt: str) -> str:
    """The rest of a call the model began in its own format (tool_parse.FORMATS), from the
    start of its body; what follows the body is left to the model."""
    key = "parameters" if fmt == "llama3" else "arguments"
    call = call_schema(tools, key)
    if fmt == "mistral":
        call = {"type": "array", "items": call, "minItems": 1}
    call = {**call, "x-guidance": _SPACED}
    return _lark(f"start: /[ \\t\\r\\n]*/ call\ncall: %json {json.dumps(call)}")


def check(grammar: str) -> None:
    """Refuse a grammar llguidance cannot build (it names what it does not implement)."""
    import llguidance

    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if problem:
        raise GrammarError(problem)
