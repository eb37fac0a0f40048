"""The disk tier below host RAM: a state written is read back whole, by what it holds;
files that are not this cache's (another model, build or layout), cut short, or whose bytes
changed are named in the log and deleted; the folder stays under its bound."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from coderai.engine.backends.llamacpp.checkpoints import Checkpoint, Held
from coderai.engine.backends.llamacpp.disk_cache import (
    STALE_DAYS,
    DiskCache,
    Entry,
    Unreadable,
    compat_key,
    decode,
    encode,
    file_name,
)
from coderai.engine.backends.llamacpp.ram_cache import Saved
from coderai.engine.holdings import LEAD, lead_of

COMPAT = {"model": "/m/smol.gguf", "size": 100, "mtime_ns": 5, "build": "0.3.36", "kv": "f16"}


def state(tokens: list[int], start: int = 0, size: int = 1000) -> Saved:
    data = bytearray((i * 7) % 256 for i in range(size))
    points = [Checkpoint(len(tokens) - 1, bytearray(b"window" * 3))]
    return Saved(tokens, data, Held(start, len(tokens)), points, start)


def opened(root: Path, max_bytes: int = 1 << 30, compat: dict[str, object] = COMPAT) -> DiskCache:
    disk = DiskCache(root, dict(compat), max_bytes)
    disk.open()
    return disk


def test_a_state_encoded_is_decoded_whole_and_its_file_is_named_by_what_it_holds() -> None:
    saved = state(list(range(50)), start=10)
    back = decode(encode(saved, COMPAT), COMPAT)
    assert back.tokens == saved.tokens and back.start == 10 and back.held == saved.held
    assert back.data == saved.data
    assert [(c.tokens, c.data) for c in back.checkpoints] == [(49, bytearray(b"window" * 3))]
    assert file_name(list(range(50)), 10) == file_name(list(range(50)), 10)
    assert file_name(list(range(50)), 10) != file_name(list(range(50)), 0)


def test_what_is_not_a_whole_state_of_this_cache_cannot_be_decoded() -> None:
    blob = encode(state([1, 2, 3]), COMPAT)
    with pytest.raises(Unreadable, match="another model file"):
        decode(blob, {**COMPAT, "build": "0.3.37"})
    with pytest.raises(Unreadable, match="not a prompt-cache file"):
        decode(b"GGUF" + blob, COMPAT)
    with pytest.raises(Unreadable, match="bytes of state"):
        decode(blob[:-5], COMPAT)
    changed = bytearray(blob)
    changed[-100] ^= 0xFF
    with pytest.raises(Unreadable, match="digest"):
        decode(bytes(changed), COMPAT)
    with pytest.raises(Unreadable, match="cut short"):
        decode(blob[:20], COMPAT)


def test_states_written_are_found_by_a_later_cache_and_read_back(tmp_path: Path) -> None:
    disk = opened(tmp_path)
    head, tail = state(list(range(100))), state(list(range(200)), start=100)
    disk.save(head)
    disk.save(tail)
    assert disk.flush(10)
    disk.close()
    again = opened(tmp_path)  # as after a restart
    assert len(again) == 2 and again.bytes == disk.bytes
    prompt = [*range(200), 999]
    found = again.candidates(prompt, 0, 1 << 30)
    # the head, then the tail that goes on from it
    assert [(e.start, len(e.tokens)) for e in found] == [(0, 100), (100, 200)]
    # what RAM could not hold is not read
    assert again.candidates(prompt, 0, found[1].size - 1) == found[:1]
    loaded = again.load(found[1])
    assert loaded is not None and loaded.data == tail.data and loaded.start == 100
    # a sequence that holds nearly all a state gives needs none of it; nor one that
    # shares a few tokens (a chat template's) with it
    assert again.candidates(prompt, 160, 1 << 30) == []
    assert again.candidates([*range(10), 5, 6, 7], 0, 1 << 30) == []
    again.close()


def test_foreign_corrupt_and_half_written_files_are_named_and_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    disk = opened(tmp_path)
    disk.save(state(list(range(40))))
    disk.save(state(list(range(80))))
    assert disk.flush(10)
    disk.close()
    folder = tmp_path / compat_key(COMPAT)
    files = sorted(folder.iterdir())
    assert len(files) == 1  # the longer state holds all the shorter one did
    (folder / "stray.state").write_bytes(encode(state([1, 2]), {**COMPAT, "model": "/other"}))
    (folder / "half.state.tmp").write_bytes(b"CAIPC1")
    os.utime(folder / "half.state.tmp", (1, 1))  # long ago: a write cut short, not another's
    corrupt = folder / files[0].name
    with caplog.at_level(logging.WARNING, logger="coderai.engine"):
        again = opened(tmp_path)
        assert "stray.state is not used and is deleted: it belongs to another" in caplog.text
        assert not (folder / "stray.state").exists() and not (folder / "half.state.tmp").exists()
        (entry,) = again.candidates([*range(80), 1], 0, 1 << 30)
        raw = bytearray(corrupt.read_bytes())
        raw[-1] ^= 0xFF
        corrupt.write_bytes(bytes(raw))
        assert again.load(entry) is None
        assert f"{corrupt.name} is not used and is deleted: its bytes do not match" in caplog.text
    assert not corrupt.exists() and len(again) == 0 and again.bytes == 0
    again.close()


def test_the_folder_stays_under_its_bound_least_recently_used_first(tmp_path: Path) -> None:
    talks = [list(range(1000 * i, 1000 * i + 100)) for i in range(3)]
    one = len(encode(state(talks[0]), COMPAT))
    disk = opened(tmp_path, max_bytes=int(2.5 * one))

    def found(talk: list[int]) -> list[Entry]:
        return disk.candidates([*talk, 7], 0, 1 << 30)

    for i, talk in enumerate(talks):
        disk.save(state(talk))
        assert disk.flush(10)
        if i == 1:  # the first is used again: the second is now the least recent
            (first,) = found(talks[0])
            assert disk.load(first) is not None
    assert disk.bytes <= disk.max_bytes
    assert [len(found(t)) for t in talks] == [1, 0, 1]
    disk.close()


def test_a_state_larger_than_the_bound_is_not_written_and_a_lagging_disk_drops_states(
    tmp_path: Path,
) -> None:
    disk = opened(tmp_path, max_bytes=500)
    disk.save(state(list(range(100))))  # 1,000 bytes of state
    assert disk.flush(10) and len(disk) == 0
    disk.close()
    disk.save(state(list(range(100))))  # closed: nothing is queued
    assert disk.flush(1)


def test_a_folder_unused_for_a_week_is_deleted_as_a_cache_opens_beside_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old_build = opened(tmp_path, compat={**COMPAT, "build": "0.3.1"})
    old_build.save(state(list(range(100))))
    recent = opened(tmp_path, compat={**COMPAT, "model": "/m/other.gguf"})
    recent.save(state(list(range(100))))
    assert old_build.flush(10) and recent.flush(10)
    old_build.close()
    recent.close()
    stale, kept = tmp_path / compat_key(old_build.compat), tmp_path / compat_key(recent.compat)
    week = time.time() - STALE_DAYS * 86400 - 60
    for path in [*stale.iterdir(), stale]:  # the folder's own time, and each file's
        os.utime(path, (week, week))
    # the kept folder's files are old too, but one was restored (touched) within the week
    (old_file, *_), fresh = sorted(kept.iterdir()), time.time() - 3600
    os.utime(kept, (week, week))
    os.utime(old_file, (fresh, fresh))
    with caplog.at_level(logging.INFO, logger="coderai.engine"):
        again = opened(tmp_path)
    assert not stale.exists() and kept.exists() and (tmp_path / compat_key(COMPAT)).exists()
    assert f"{stale.name} has not been used for {STALE_DAYS} days and is deleted" in caplog.text
    again.close()


def test_its_leads_follow_the_index_as_states_are_written_evicted_and_lost(
    tmp_path: Path,
) -> None:
    talks = [list(range(1000 * i, 1000 * i + LEAD + 10)) for i in range(3)]
    one = len(encode(state(talks[0]), COMPAT))
    disk = opened(tmp_path, max_bytes=int(2.5 * one))
    assert disk.leads == frozenset()
    for talk in talks[:2]:
        disk.save(state(talk))
    assert disk.flush(10)
    assert disk.leads == {lead_of(talks[0]), lead_of(talks[1])}
    disk.save(state(talks[2]))  # past the bound: the least recently used goes
    assert disk.flush(10)
    assert disk.leads == {lead_of(talks[1]), lead_of(talks[2])}
    (entry,) = disk.candidates([*talks[1], 7], 0, 1 << 30)
    (tmp_path / compat_key(COMPAT) / entry.name).write_bytes(b"CAIPC1")  # it goes bad
    assert disk.load(entry) is None
    assert disk.leads == {lead_of(talks[2])}
    disk.close()
    assert opened(tmp_path).leads == {lead_of(talks[2])}  # read back as a cache opens
