"""The prompt cache on disk with the real backend on the tiny GGUF: a conversation's
prefix outlives its engine (the engine stops, a new one starts on the same state folder,
the next turn starts from disk and answers as cold), and a file changed on disk between
the two is named in the log, deleted, and the turn read cold."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from coderai.engine.backends.llamacpp.machine import STATE_VARIABLE
from tests.integration.engine.backends.llamacpp.test_llamacpp_batching import (
    cold_text,
    model,
    turns_counted,
)

FIRST = "Servers answer requests\n" * 30
LATER = FIRST + "and then some more words"


def files(state: Path) -> list[Path]:
    return sorted((state / "prompt-cache").glob("*/*.state"))


def test_a_conversation_goes_on_from_disk_after_its_engine_restarts(
    tiny_models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STATE_VARIABLE, str(tmp_path))
    spec = model(tiny_models[1], n_ctx=1024)
    (first,), _, _ = asyncio.run(turns_counted(spec, [FIRST]))
    # the engine stopped: what its cache held was saved, and reached the disk
    assert files(tmp_path)
    (again,), text, (after,) = asyncio.run(turns_counted(spec, [LATER]))  # a new engine
    assert after["disk_cache_loads"] >= 1 and after["ram_cache_hits"] == 1
    assert again.cached_tokens >= first.prompt_tokens - 1
    monkeypatch.delenv(STATE_VARIABLE)
    assert text == cold_text(spec, LATER)


def test_a_state_file_changed_on_disk_is_named_deleted_and_the_turn_read_cold(
    tiny_models: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv(STATE_VARIABLE, str(tmp_path))
    spec = model(tiny_models[1], n_ctx=1024)
    asyncio.run(turns_counted(spec, [FIRST]))
    changed = {}
    for path in files(tmp_path):
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0xFF  # its state's last byte, after the header
        path.write_bytes(bytes(raw))
        changed[path] = bytes(raw)
    assert changed
    with caplog.at_level(logging.WARNING, logger="coderai.engine"):
        (again,), _, (after,) = asyncio.run(turns_counted(spec, [LATER]))
    assert "is not used and is deleted: its bytes do not match their digest" in caplog.text
    assert after.get("disk_cache_loads", 0) == 0 and again.cached_tokens == 0
    # the changed files are gone (what the cold turn saved on stopping is new)
    assert all(not p.exists() or p.read_bytes() != raw for p, raw in changed.items())
