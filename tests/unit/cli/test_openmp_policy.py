"""Engines ask OpenMP for a brief spin at a barrier (see coderai.cli.engine.brief_openmp_spin),
unless told otherwise."""

from __future__ import annotations

import os

import pytest

from coderai.cli.engine import OPENMP_SPIN, brief_openmp_spin


def unset(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """Remove variables for one test: set first, so that monkeypatch puts back what was
    there before, absent included (a bare delenv of an absent name records nothing, and
    what the code under test sets would outlive the test)."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_engines_default_to_a_brief_openmp_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    unset(monkeypatch, "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    brief_openmp_spin()
    assert os.environ["GOMP_SPINCOUNT"] == OPENMP_SPIN
    assert "OMP_WAIT_POLICY" not in os.environ


@pytest.mark.parametrize(("name", "value"), [("OMP_WAIT_POLICY", "PASSIVE"),
                                             ("GOMP_SPINCOUNT", "300000")])  # fmt: skip
def test_an_operators_own_openmp_wait_wins(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    unset(monkeypatch, "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    monkeypatch.setenv(name, value)
    brief_openmp_spin()
    assert os.environ[name] == value
    assert "GOMP_SPINCOUNT" not in os.environ or name == "GOMP_SPINCOUNT"


def test_an_empty_setting_is_no_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """libgomp reads an empty variable as unset (a systemd `Environment=NAME=` line)."""
    unset(monkeypatch, "GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", " ")
    brief_openmp_spin()
    assert os.environ["GOMP_SPINCOUNT"] == OPENMP_SPIN
