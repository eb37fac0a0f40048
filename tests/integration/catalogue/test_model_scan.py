"""`coderai models scan` over the stores of other tools, laid out here as those tools lay
them out (a Hugging Face cache with a GGUF repo and a transformers repo, Ollama's
manifests and blobs, LM Studio's folders, an operator's folder), the model files real
(the tiny model, as GGUF and as transformers): what it proposes, and what it adds, to the
catalogue file or to a running server, which then serves the model from where it lies."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from coderai.catalogue import model_scan
from coderai.catalogue.model_scan import quant
from tests.support.server import Server

ADMIN = "test-admin-key"


@pytest.fixture(scope="module")
def stores(tiny_models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose tools' stores each hold a model (the tiny one, copied in as they
    would have downloaded it)."""
    hf, gguf = tiny_models
    home = tmp_path_factory.mktemp("home")
    # the Hugging Face cache: blobs, and snapshots that link to them
    repo = home / ".cache/huggingface/hub/models--acme--tiny-GGUF"
    blob = repo / "blobs" / hashlib.sha256(gguf.read_bytes()).hexdigest()
    blob.parent.mkdir(parents=True)
    shutil.copy(gguf, blob)
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    for name in ("tiny-Q4_K_M.gguf", "tiny-F16.gguf", "mmproj-tiny-F16.gguf"):
        (snapshot / name).symlink_to(blob)
    shutil.copytree(hf, home / ".cache/huggingface/hub/models--acme--tiny/snapshots/feed")
    # Ollama: a manifest naming the model's blob
    ollama = home / ".ollama/models"
    digest = "sha256:" + hashlib.sha256(gguf.read_bytes()).hexdigest()
    (ollama / "blobs").mkdir(parents=True)
    shutil.copy(gguf, ollama / "blobs" / digest.replace(":", "-"))
    manifest = {"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": digest, "size": 1},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:00"}]}  # fmt: skip
    for where in ("registry.ollama.ai/library/tiny/latest", "hf.co/acme/tiny-GGUF/Q8_0"):
        (ollama / "manifests" / where).parent.mkdir(parents=True, exist_ok=True)
        (ollama / "manifests" / where).write_text(json.dumps(manifest))
    # LM Studio, and a folder of the operator's
    studio = home / ".lmstudio/models/acme/tiny-GGUF"
    studio.mkdir(parents=True)
    shutil.copy(gguf, studio / "tiny-Q8_0.gguf")
    mine = home / "models"
    mine.mkdir()
    shutil.copy(gguf, mine / "mine.gguf")
    return home


def scan(home: Path, config: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    command = [sys.executable, "-m", "coderai", "models", "scan", "--config", str(config),
               "--folder", str(home / "models"), *argv]  # fmt: skip
    return subprocess.run(command, cwd=home, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def proposals(done: subprocess.CompletedProcess[str]) -> dict[str, list[str]]:
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    return {row[0]: row[1:] for row in rows}


def test_quantisations_are_read_from_file_names() -> None:
    assert quant("Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert quant("SmolLM2-135M-Instruct.Q4_1.gguf") == "Q4_1"
    assert quant("model-IQ2_XS-00001-of-00003.gguf") == "IQ2_XS"
    assert quant("gemma-3-270m-it-bf16.gguf") == "BF16"
    assert quant("plain.gguf") == ""


def test_each_stores_models_are_proposed_in_place(stores: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"server": {"port": 9}}))  # nothing listens there
    done = scan(stores, config)
    assert done.returncode == 0, done.stderr
    found = proposals(done)
    assert set(found) == {
        "acme/tiny-GGUF:Q4_K_M", "acme/tiny-GGUF:F16",  # the projector is no model
        "acme/tiny",  # a transformers repo
        "tiny:latest", "hf.co/acme/tiny-GGUF:Q8_0",  # Ollama's names
        "acme/tiny-GGUF:Q8_0",  # LM Studio's
        "mine",
    }, done.stdout  # fmt: skip
    assert found["acme/tiny"][:3] == ["transformers", "huggingface", "new"]
    assert found["tiny:latest"][:2] == ["gguf", "ollama"]
    assert Path(found["tiny:latest"][3]).parent.name == "blobs"  # the blob itself, not a copy


def test_picked_models_are_added_to_the_catalogue_file_and_not_proposed_twice(
    stores: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"server": {"port": 9}}))
    done = scan(stores, config, "--add", "tiny:latest", "--add", "acme/tiny")
    assert done.returncode == 0, done.stderr
    entries = json.loads((tmp_path / "models.json").read_text())
    ids = [e["id"] for e in entries]
    assert ids[-2:] == ["acme/tiny", "tiny:latest"]
    assert len(ids) == 3  # the embedded default model stays beside them
    again = proposals(scan(stores, config))
    assert again["tiny:latest"][2] == "in the catalogue as tiny:latest"
    refused = scan(stores, config, "--add", "tiny:latest")
    assert refused.returncode == 2 and "in the catalogue" in refused.stderr
    unknown = scan(stores, config, "--add", "nope")
    assert unknown.returncode == 2 and "nothing found as nope" in unknown.stderr


def test_a_running_server_is_told_and_serves_the_model_from_its_store(
    stores: Path, tmp_path: Path
) -> None:
    models: list[dict[str, Any]] = [{"id": "fake", "format": "fake"}]
    srv = Server(tmp_path / "server", {"engines": 1}, models,
                 extra_config={"auth": {"admin_key": ADMIN}})  # fmt: skip
    try:
        srv.wait_ready(1)
        done = scan(stores, srv.workdir / "config.json", "--add", "tiny:latest")
        assert done.returncode == 0, done.stderr
        assert "added to the running server: tiny:latest" in done.stderr
        body = {"model": "tiny:latest", "prompt": "The quick", "max_tokens": 4}
        answer = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=120)
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] >= 1
    finally:
        srv.stop()


def test_an_operators_folder_is_looked_into_a_few_levels_deep_and_not_into_hidden_ones(
    tmp_path: Path,
) -> None:
    for where in ("a/b/c-Q4_K_M.gguf", "a/b/c/d/e/f/g/deep.gguf", ".cache/hidden.gguf"):
        (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / where).write_bytes(b"GGUF")
    found = [f.id for f in model_scan.folder(tmp_path)]
    assert found == ["c-Q4_K_M"]
