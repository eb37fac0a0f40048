from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from coderai.catalogue.entries import ModelEntry
from coderai.errors import ModelFileError, NotAFileOrFolder
from coderai.front.dispatch.probe import Probed, probe, refusals


def test_a_stated_format_is_taken_without_touching_the_file(tmp_path: Path) -> None:
    entry = ModelEntry(id="m", path=str(tmp_path / "absent"), format="fake")
    assert asyncio.run(probe([entry])) == {"m": "fake"}


def test_each_model_gets_its_files_format_or_the_reason_it_has_none(tmp_path: Path) -> None:
    (tmp_path / "w.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "config.json").write_text("{}")
    os.mkfifo(tmp_path / "piped")
    names = {"g": "w.gguf", "t": "folder", "piped": "piped", "gone": "absent"}
    entries = [ModelEntry(id=i, path=str(tmp_path / name)) for i, name in names.items()]
    probed = asyncio.run(probe(entries))
    assert (probed["g"], probed["t"]) == ("gguf", "transformers")
    assert isinstance(probed["piped"], NotAFileOrFolder)
    gone = probed["gone"]
    assert isinstance(gone, ModelFileError) and "absent" in gone.message


def test_models_sharing_a_file_share_one_check(tmp_path: Path) -> None:
    calls: list[str] = []

    def detect(path: str) -> str:
        calls.append(path)
        return "gguf"

    path = str(tmp_path / "shared.gguf")
    entries = [ModelEntry(id="a", path=path), ModelEntry(id="b", alias="x", path=path)]
    assert asyncio.run(probe(entries, detect=detect)) == {"a": "gguf", "b": "gguf"}
    assert calls == [path]


def test_a_finished_check_is_not_reused_so_a_file_created_since_is_seen(tmp_path: Path) -> None:
    entries = [ModelEntry(id="late", path=str(tmp_path / "late.gguf"))]
    assert isinstance(asyncio.run(probe(entries))["late"], ModelFileError)
    (tmp_path / "late.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    assert asyncio.run(probe(entries)) == {"late": "gguf"}


def test_a_check_past_the_deadline_is_that_models_error_and_the_others_are_answered() -> None:
    release = threading.Event()

    def detect(path: str) -> str:
        if path == "/stuck":
            release.wait()
        return "gguf"

    entries = [ModelEntry(id="stuck", path="/stuck"), ModelEntry(id="fine", path="/fine")]
    try:
        probed = asyncio.run(probe(entries, timeout=0.2, detect=detect))
    finally:
        release.set()
    assert probed["fine"] == "gguf"
    stuck = probed["stuck"]
    assert isinstance(stuck, ModelFileError)
    assert stuck.message == "checking model file /stuck took more than 0.2 s"


def test_a_stuck_check_is_waited_on_again_rather_than_started_twice() -> None:
    release = threading.Event()
    calls: list[str] = []

    def detect(path: str) -> str:
        calls.append(path)
        release.wait()
        return "gguf"

    entries = [ModelEntry(id="stuck", path="/stuck")]
    try:
        first = asyncio.run(probe(entries, timeout=0.1, detect=detect))
        second = asyncio.run(probe(entries, timeout=0.1, detect=detect))
    finally:
        release.set()
    assert isinstance(first["stuck"], ModelFileError)
    assert isinstance(second["stuck"], ModelFileError)
    assert calls == ["/stuck"]


def test_a_check_that_fails_unexpectedly_is_that_models_error() -> None:
    probed = asyncio.run(probe([ModelEntry(id="nul", path="bad\0path")]))
    error = probed["nul"]
    assert isinstance(error, ModelFileError) and error.message.startswith("cannot check")


def test_only_fifos_sockets_and_devices_stop_a_catalogue_from_being_saved() -> None:
    piped = NotAFileOrFolder("model path /p is a FIFO, not a file or a folder")
    probed: dict[str, Probed] = {"ok": "gguf", "gone": ModelFileError("/g"), "piped": piped}
    assert refusals(probed) == [f"model 'piped': {piped.message}"]
