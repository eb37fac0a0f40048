"""Model backends, keyed by the capability they give an engine."""

from __future__ import annotations

from importlib.util import find_spec

from coderai.engine.backends.base import Backend
from coderai.engine.backends.fake import FakeBackend


def available_backends() -> dict[str, Backend]:
    """The backends whose libraries are installed. Checking costs no import: torch and
    llama.cpp load only with the first model that needs them."""
    backends: dict[str, Backend] = {"fake": FakeBackend()}
    if find_spec("torch") and find_spec("transformers"):
        from coderai.engine.backends.transformers.backend import TransformersBackend

        backends["transformers"] = TransformersBackend()
    if find_spec("llama_cpp"):
        from coderai.engine.backends.llamacpp.backend import LlamaCppBackend

        backends["gguf"] = LlamaCppBackend()
    return backends
