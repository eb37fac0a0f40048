"""write_json_atomically (invariant 6): a reader sees the old file or the new one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coderai.common.json_files import write_json_atomically


def test_the_new_file_replaces_the_old_by_rename_not_in_place(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    write_json_atomically(path, {"models": ["old"]})
    with open(path, encoding="utf-8") as reader:  # a reader that opened the old file
        old_inode = path.stat().st_ino
        write_json_atomically(path, {"models": ["new"]})
        # written in place, the open file would now show the new text (or half of it)
        assert json.load(reader) == {"models": ["old"]}
    assert path.stat().st_ino != old_inode
    assert json.loads(path.read_text()) == {"models": ["new"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.json"]


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "models.json"
    write_json_atomically(path, {"models": ["old"]})
    with pytest.raises(TypeError):  # fails after part of the JSON is written
        write_json_atomically(path, {"models": ["new", object()]})
    assert json.loads(path.read_text()) == {"models": ["old"]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.json"]
