from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from coderai.catalogue.file_format import detect_format, required_capability
from coderai.config import Config, engine_settings, engine_slots
from coderai.engine.backends.transformers.backend import choose_dtype
from coderai.errors import JobError, ModelFileError, NotAFileOrFolder


def test_gguf_is_known_by_its_magic_bytes_not_its_name(tmp_path: Path) -> None:
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"GGUF\x03\x00\x00\x00")
    assert detect_format(str(weights)) == "gguf"


def test_a_folder_with_config_json_is_a_transformers_model(tmp_path: Path) -> None:
    folder = tmp_path / "model.gguf"  # a misleading name changes nothing
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert detect_format(str(folder)) == "transformers"


@pytest.mark.parametrize("content", [b"PK\x03\x04", b""])
def test_other_files_are_refused_naming_the_file(tmp_path: Path, content: bytes) -> None:
    other = tmp_path / "model.gguf"
    other.write_bytes(content)
    with pytest.raises(ModelFileError, match=r"model\.gguf"):
        detect_format(str(other))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"absent\.gguf"):
        detect_format(str(tmp_path / "absent.gguf"))


def test_a_folder_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"config\.json"):
        detect_format(str(tmp_path))


@pytest.mark.timeout(5)  # opening a FIFO for reading waits for a writer: a hang, not a failure
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "piped.gguf"
    os.mkfifo(fifo)
    with pytest.raises(NotAFileOrFolder, match=r"piped\.gguf is a FIFO"):
        detect_format(str(fifo))


def test_sockets_and_devices_are_refused_by_kind(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "model.sock"))
        with pytest.raises(NotAFileOrFolder, match="is a socket"):
            detect_format(str(tmp_path / "model.sock"))
    with pytest.raises(NotAFileOrFolder, match="is a character device"):
        detect_format(os.devnull)


def test_a_folder_whose_config_json_is_a_fifo_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(ModelFileError, match=r"config\.json"):
        detect_format(str(tmp_path))


def test_a_gguf_may_ask_for_the_transformers_backend() -> None:
    assert required_capability("gguf", {}) == "gguf"
    assert required_capability("gguf", {"backend": "transformers"}) == "transformers"
    assert required_capability("transformers", {}) == "transformers"


@pytest.mark.parametrize(
    ("options", "cuda", "bf16", "dtype"),
    [
        ({}, False, False, "float32"),
        ({}, True, True, "bfloat16"),
        ({}, True, False, "float16"),
        ({"dtype": "float16"}, False, False, "float16"),
    ],
)
def test_dtype_follows_the_device_unless_the_entry_says(
    options: dict[str, str], cuda: bool, bf16: bool, dtype: str
) -> None:
    assert choose_dtype(options, cuda, bf16) == dtype


def test_an_unknown_dtype_is_refused() -> None:
    with pytest.raises(JobError, match="dtype"):
        choose_dtype({"dtype": "int3"}, False, False)


def test_engine_overrides_resolve_by_name() -> None:
    config = Config.model_validate(
        {
            "server": {"max_parallel_requests": 4, "max_parallel_requests_overrides": {"big": 16}},
            "models": {"max_model_instances": 2, "max_model_instances_overrides": {"big": 3}},
        }
    )
    assert engine_slots(config, "big") == 16
    assert engine_slots(config, "small") == 4
    assert engine_settings(config, "big")["max_model_instances"] == 3
    assert engine_settings(config, "small")["max_model_instances"] == 2
