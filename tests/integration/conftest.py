from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from coderai.engine.backends.llamacpp.machine import MACHINE_VARIABLE
from tests.support.server import MACHINE, Server, openai_client
from tests.support.tinymodel import build, build_recurrent, build_windowed

StartServer = Callable[..., Server]


@pytest.fixture(scope="session", autouse=True)
def machine_folder() -> Iterator[None]:
    """What engines learn of the machine (the kernels' trial, the attention kernels'
    timings) goes in the session's own folder, for engines loaded in this process as for
    the servers' (tests/support/server.py), not in the user's state folder."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(MACHINE_VARIABLE, MACHINE)
        yield


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """Start `coderai run` processes; all are stopped when the test ends."""
    servers: list[Server] = []

    def start(
        server: dict[str, Any], models: list[dict[str, Any]] | None, engines: int = 1, **kw: Any
    ) -> Server:
        srv = Server(
            tmp_path / f"server{len(servers)}", {"engines": engines, **server}, models, **kw
        )
        servers.append(srv)
        srv.wait_ready(engines)
        return srv

    yield start
    for srv in servers:
        srv.stop()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tiny random Llama as a transformers folder and as GGUF (same weights)."""
    return build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def windowed_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model as a GGUF whose first layer has a sliding window of 16 tokens."""
    return build_windowed(tmp_path_factory.mktemp("windowed"), window=16)


@pytest.fixture(scope="session")
def recurrent_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Mamba GGUF: one recurrent state per sequence."""
    return build_recurrent(tmp_path_factory.mktemp("recurrent"))


@pytest.fixture
def claude(server: Server) -> Iterator[anthropic.Anthropic]:
    """Anthropic's client against the module's `server`, failing at once (no retries)."""
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as c:
        yield c


@pytest.fixture
def oai(server: Server) -> Iterator[openai.OpenAI]:
    """OpenAI's client against the module's `server`."""
    with openai_client(server) as c:
        yield c
