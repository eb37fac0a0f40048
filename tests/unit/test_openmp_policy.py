"""Engines ask OpenMP for a brief spin at a barrier (see coderai.cli.brief_openmp_spin),
unless told otherwise."""

from __future__ import annotations

import os

import pytest

from coderai import cli


def test_engines_default_to_abrief_openmp_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    cli.brief_openmp_spin()
    assert os.environ["GOMP_SPINCOUNT"] == cli.OPENMP_SPIN
    assert "OMP_WAIT_POLICY" not in os.environ  # a policy would override the count


@pytest.mark.parametrize(("name", "value"), [("OMP_WAIT_POLICY", "PASSIVE"),
                                             ("GOMP_SPINCOUNT", "300000")])  # fmt: skip
def test_an_operators_own_openmp_wait_wins(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.setenv(name, value)
    cli.brief_openmp_spin()
    assert os.environ[name] == value
    assert "GOMP_SPINCOUNT" not in os.environ or name == "GOMP_SPINCOUNT"
