"""Tools the tests offer models, shared: a weather call whose arguments a random model
cannot make endless (an enum, a bounded integer, no other key)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: tools/list of published MCP servers, as they answered (descriptions left out)
MCP_DATA = Path(__file__).parents[1] / "data" / "mcp"


def mcp_servers() -> list[str]:
    """The files of MCP_DATA; an error where there are none (a test parametrized over an
    empty list is skipped, and would pass while testing nothing)."""
    found = sorted(p.name for p in MCP_DATA.glob("*.json"))
    if not found:
        raise FileNotFoundError(f"no MCP tools/list files in {MCP_DATA}")
    return found


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
