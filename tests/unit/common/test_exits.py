"""Exits in words, as the supervisor logs them and the clients of a dead engine read them."""

from __future__ import annotations

from coderai.common.exits import exit_words, signal_name


def test_a_death_by_signal_is_named_and_described() -> None:
    assert exit_words(-4) == "died of SIGILL (illegal instruction)"
    assert exit_words(-7) == "died of SIGBUS (bus error)"
    assert signal_name(-11) == "SIGSEGV"


def test_an_exit_of_its_own_gives_its_code() -> None:
    assert exit_words(3) == "exited with code 3"
    assert signal_name(0) is None and signal_name(None) is None


def test_an_unknown_signal_is_still_a_death() -> None:
    assert exit_words(-99) == "died of signal 99"
