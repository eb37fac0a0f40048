"""Tools the tests offer models, shared: a weather call whose arguments a random model
cannot make endless (an enum, a bounded integer, no other key)."""

from __future__ import annotations

from typing import Any

#: get_weather's parameters: what even a random model fills in a few tokens, whatever it
#: writes under a grammar
SHORT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Rome"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
SHORT: Any = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": SHORT_PARAMETERS},
}
