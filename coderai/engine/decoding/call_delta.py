"""A piece of a tool call as the parsers stream it (tool_parse.py, xml_call.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CallDelta:
    index: int
    #: the tool's name, on a call's first delta only
    name: str = ""
    arguments: str = ""
