"""What `coderai run` assembles before it serves (server.assemble): which engines the
front plans, who runs them and where the bus is. Built on a loop, as `coderai run` builds
it, and never started: nothing is spawned, no socket is bound."""

from __future__ import annotations

import asyncio
import gc
import re
from pathlib import Path
from typing import Any

import pytest
import zmq

from coderai.bus.sockets import ipc_endpoint
from coderai.catalogue.entries import Catalogue
from coderai.config import Config, StateFiles
from coderai.errors import ConfigError
from coderai.front.app import Front
from coderai.front.engines.host import EngineHost, InProcess, Unhosted
from coderai.front.engines.plan import EnginePlan
from coderai.front.engines.supervisor import Supervisor
from coderai.front.server import assemble

ENGINES = [{"name": "a", "backend": "cpu"}, {"name": "b", "backend": "cpu"}]


def config(single_process: bool = False, **server: Any) -> Config:
    return Config.model_validate(
        {"server": {"engine_specs": ENGINES, "single_process": single_process, **server}}
    )


def built(cfg: Config, tmp_path: Path, in_process: InProcess | None = None) -> Front:
    async def build() -> Front:
        files = StateFiles.of(cfg, tmp_path / "config.json")
        front = assemble(cfg, files, Catalogue([]), {}, str(tmp_path), in_process)
        front.dispatcher.context.term()  # never started: it holds no socket
        return front

    return asyncio.run(build())


def test_supervised_engines_are_every_planned_one_on_an_ipc_bus(tmp_path: Path) -> None:
    cfg = config(default_engine="b")
    front = built(cfg, tmp_path)
    host = front.dispatcher.host
    assert isinstance(host, Supervisor)
    assert [plan.name for plan in host.specs] == ["a", "b"]
    assert [plan.name for plan in front.directory.plans] == ["a", "b"]
    assert front.dispatcher.endpoint == ipc_endpoint(str(tmp_path))
    assert front.logbook.sources() == ["front", "a", "b"]  # each engine's output is kept
    assert front.directory.default_engine == "b"
    assert front.config is cfg


def test_single_process_runs_the_first_planned_engine_in_the_front(tmp_path: Path) -> None:
    given: list[tuple[EnginePlan, zmq.Context[zmq.Socket[bytes]], str]] = []
    host = Unhosted()

    def in_process(
        plan: EnginePlan, context: zmq.Context[zmq.Socket[bytes]], token: str
    ) -> tuple[str, EngineHost]:
        given.append((plan, context, token))
        return "inproc://coderai-test-bus", host

    front = built(config(single_process=True), tmp_path, in_process)
    ((plan, context, token),) = given
    assert plan.name == "a"
    assert [p.name for p in front.directory.plans] == ["a"]
    # inproc:// works within one context: the engine shares the dispatcher's
    assert context is front.dispatcher.context
    assert re.fullmatch(r"[0-9a-f]{32}", token)
    assert front.dispatcher.endpoint == "inproc://coderai-test-bus"
    assert front.dispatcher.host is host
    assert front.logbook.sources() == ["front"]  # the engine logs through the front's


def test_each_front_gets_its_own_bus_token(tmp_path: Path) -> None:
    tokens: list[str] = []

    def in_process(
        plan: EnginePlan, context: zmq.Context[zmq.Socket[bytes]], token: str
    ) -> tuple[str, EngineHost]:
        tokens.append(token)
        return "inproc://coderai-test-bus", Unhosted()

    built(config(single_process=True), tmp_path, in_process)
    built(config(single_process=True), tmp_path, in_process)
    assert len(tokens) == 2 and tokens[0] != tokens[1]


def test_single_process_without_an_engine_to_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"single_process: .* started without an engine"):
        built(config(single_process=True), tmp_path)
    gc.collect()  # nothing was made to leak: no "Unclosed context" warning (an error here)
