"""The test seam for deaths (CODERAI_DIE_AT): its rules, and that a rule kills the process
with the real signal, as the front and the probe's parent then see it."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from coderai.engine import die_at
from coderai.engine.die_at import Rule, due, parse


def test_rules_name_a_phase_a_signal_and_maybe_repack() -> None:
    assert parse("prompt:SIGILL, load:bus:repack,generate:11") == (
        Rule("prompt", signal.SIGILL),
        Rule("load", signal.SIGBUS, repack=True),
        Rule("generate", signal.SIGSEGV),
    )
    assert parse("") == ()


@pytest.mark.parametrize(
    "text", ["prompt", "reading:SIGILL", "prompt:SIGNOPE", "prompt:SIGILL:always", "a:b:c:d"]
)
def test_a_malformed_rule_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="CODERAI_DIE_AT"):
        parse(text)


def test_a_repack_rule_fires_only_where_the_extra_buffer_types_are_on() -> None:
    rules = parse("prompt:SIGILL:repack,load:SIGBUS")
    assert due(rules, "prompt", repack=True) == signal.SIGILL
    assert due(rules, "prompt", repack=False) is None
    assert due(rules, "load", repack=False) == signal.SIGBUS
    assert due(rules, "generate", repack=True) is None


def test_a_process_at_a_due_phase_dies_of_that_signal() -> None:
    code = "from coderai.engine import die_at; die_at.at('load'); print('lived')"
    env = {die_at.VARIABLE: "load:SIGILL"}
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert child.returncode == -signal.SIGILL
    assert "lived" not in child.stdout
    other = subprocess.run([sys.executable, "-c", code.replace("'load'", "'prompt'")],
                           env=env, capture_output=True, text=True)  # fmt: skip
    assert other.returncode == 0 and "lived" in other.stdout
