"""A heartbeat's kernel decisions, checked by the front (bus/checker.py, kernels_of):
llama.cpp's extra buffer types and each model's attention kernel, each on or off with why."""

from __future__ import annotations

from typing import Any

import pytest

from coderai.bus.checker import kernels_of
from coderai.errors import BusProtocolError

DECIDED = {"on": False, "why": "timed on this machine"}


@pytest.mark.parametrize(
    "kernels",
    [
        {},  # an engine that decided nothing yet, or an older one
        {"extra_buffer_types": {"machine": DECIDED, "models": {"m": DECIDED}}},
        {"attention": {"models": {"m": DECIDED}}},
        {"extra_buffer_types": {}, "attention": {"models": {}}},
    ],
)
def test_decisions_in_their_shape_pass(kernels: dict[str, Any]) -> None:
    assert kernels_of(kernels) == kernels


@pytest.mark.parametrize(
    "kernels",
    [
        [],
        {"attention": []},
        {"attention": {"models": {"m": {"on": "yes", "why": "x"}}}},
        {"attention": {"models": {"m": {"on": True}}}},
        {"attention": {"models": []}},
        {"extra_buffer_types": {"models": {"m": {"why": "x"}}}},
    ],
)
def test_malformed_decisions_are_a_protocol_error(kernels: Any) -> None:
    with pytest.raises(BusProtocolError):
        kernels_of(kernels)
