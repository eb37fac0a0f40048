"""The model objects of /v1/models and /v1/models/{id}: OpenAI's four fields, and what
local clients read to size their prompts (opencode, Cline and Continue: LM Studio's and
vLLM's names for the window), whether the model is loaded and where, and what it can do.

    {"id", "object": "model", "created": 0, "owned_by": "coderai",
     "context_length": 32768, "max_model_len": 32768, "loaded": true,
     "capabilities": ["tools"], "input_modalities": ["text"],
     "loaded_on": [{"engine": "e0", "busy": false, "idle_seconds": 12.5}]}

A loaded model's facts are its engine's (the window it created); an unloaded one's, its
file's (catalogue/model_facts.py), which the engine may lower when memory is short."""

from __future__ import annotations

from typing import Any

from coderai.catalogue.entries import ModelEntry
from coderai.catalogue.model_facts import ModelFacts, from_report

#: where a model is resident: (engine name, its report in the engine's heartbeat)
Placement = tuple[str, dict[str, Any]]


def placements(entry: ModelEntry, residents: list[Placement]) -> list[Placement]:
    return [(engine, r) for engine, r in residents if r.get("model") == entry.id]


def model_object(
    name: str, file_facts: ModelFacts | None = None, where: list[Placement] | None = None
) -> dict[str, Any]:
    """A model as listed, under the name asked for (an alias answers as itself)."""
    out: dict[str, Any] = {"id": name, "object": "model", "created": 0, "owned_by": "coderai"}
    if file_facts is None:
        return out
    where = where or []
    reported = [from_report(report) for _, report in where]
    facts = reported[0] if reported else file_facts
    # engines may have made different windows: a client must fit the smallest
    windows = [f.context for f in reported if f.context]
    context = min(windows) if windows else file_facts.context
    if context:
        out["context_length"] = out["max_model_len"] = context
    out["loaded"] = bool(where)
    out["capabilities"] = facts.capabilities()
    out["input_modalities"] = ["text", "image"] if facts.vision else ["text"]
    out["loaded_on"] = [
        {
            "engine": engine,
            "busy": bool(r.get("busy")),
            "idle_seconds": round(r.get("idle_for", 0), 1),
        }
        for engine, r in where
    ]
    return out
