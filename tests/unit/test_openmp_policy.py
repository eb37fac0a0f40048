"""Engines ask OpenMP not to spin (see coderai.cli._passive_openmp), unless told otherwise."""

from __future__ import annotations

import os

import pytest

from coderai import cli


def test_engines_default_to_a_passive_openmp_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    cli._passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_an_operators_own_openmp_wait_policy_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    cli._passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
