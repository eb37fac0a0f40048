"""The after-the-fact check of a model's tool calls: what a grammar could not enforce
(grammar.TOOL: a keyword llguidance skips, or a call the model began outside any grammar)
is checked once the call is whole, against the tool's full schema. A call that breaks
its schema is still returned as written (the client validates, and an agent tells its
model what was wrong); the engine's log says which call and why, so that an operator
can tell a model's mistake from a server's."""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("coderai.engine")


class CallCheck:
    """One sequence's calls as they stream (index: name, arguments' JSON so far)."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self.schemas = {
            t["function"]["name"]: t["function"].get("parameters") or {"type": "object"}
            for t in tools
            if isinstance(t.get("function"), dict)
        }
        self.calls: dict[int, list[str]] = {}

    def add(self, index: int, name: str, arguments: str) -> None:
        call = self.calls.setdefault(index, ["", ""])
        call[0] = name or call[0]  # a delta names its call, or carries arguments only
        call[1] += arguments

    def problems(self) -> list[str]:
        """What the whole calls break, one line each ([] when they all hold)."""
        return [
            f"call {index} to {name!r}: {problem}"
            for index, (name, arguments) in sorted(self.calls.items())
            if (problem := breaks(self.schemas.get(name), arguments))
        ]


def breaks(schema: dict[str, Any] | None, arguments: str) -> str:
    """What a call's arguments break ("" if nothing): no such tool, JSON that is no object,
    or the first error the validator finds in them. A schema the validator cannot read
    checks nothing."""
    import jsonschema

    if schema is None:
        return "no tool has that name"
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return "its arguments are not JSON"
    try:
        kind = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
        error = jsonschema.exceptions.best_match(kind(schema).iter_errors(value))
    except Exception as exc:  # a $ref it cannot resolve, a keyword it cannot read
        log.debug("a tool's schema cannot check its call: %s", exc)
        return ""
    if error is None:
        return ""
    where = "/".join(str(p) for p in error.absolute_path) or "the arguments"
    return f"{where}: {error.message[:200]}"
