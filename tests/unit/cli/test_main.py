"""Which command an argv names, before any command's module is imported."""

from __future__ import annotations

import pytest

from coderai.cli.main import named


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["run", "--config", "c.json"], "run"),
        (["--log-level", "DEBUG", "engine", "--name", "e"], "engine"),
        (["--log-level=DEBUG", "models", "list"], "models"),
        (["launch", "claude", "--", "run"], "launch"),
        (["--help"], None),
        ([], None),
    ],
)
def test_the_command_is_the_first_word_that_is_no_option(
    argv: list[str], command: str | None
) -> None:
    assert named(argv) == command
