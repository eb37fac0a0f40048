"""Model backends. Each maps a model spec to a loaded instance that steps sequences."""

from __future__ import annotations

from coderai.engine.backends.base import Backend
from coderai.engine.backends.fake import FakeBackend


def available_backends() -> dict[str, Backend]:
    """Backends this engine can run, keyed by the model format they serve."""
    return {"fake": FakeBackend()}
