"""The attention kernel a llama.cpp model's context is made with on the CPU: timed on this
machine at the first load of its attention's shape, the costs kept in the machine folder
and read back at the next start, the choice and why in /healthz and the log; a model
entry's `flash_attn` forces either."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import gguf

from coderai.engine.backends.llamacpp.attention import LAYERS, Costs, Turn, choose, turn_seconds
from tests.integration.conftest import StartServer
from tests.support.server import Server, openai_client, wait_for

TIMING = "flash attention: timing both kernels"


def start(
    start_server: StartServer, tiny_models: tuple[Path, Path], state: Path, **entry: Any
) -> Server:
    server = {"state_dir": str(state), "heartbeat_interval": 0.25}
    return start_server(server, [{"id": "tiny", "path": str(tiny_models[1]), **entry}])


def chosen(srv: Server) -> dict[str, Any]:
    """The model's kernel as the engine's heartbeat reports it, once it does."""

    def engine() -> dict[str, Any]:
        (view,) = srv.health()["engines"]
        return dict(view)

    def reported() -> bool:
        return "tiny" in engine()["kernels"].get("attention", {}).get("models", {})

    with openai_client(srv) as client:  # the model loads for a request
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2
        )
    wait_for(reported)
    return dict(engine()["kernels"]["attention"]["models"]["tiny"])


def block_count(path: Path) -> int:
    reader = gguf.GGUFReader(str(path))
    field = reader.fields["llama.block_count"]
    return int(field.parts[field.data[0]][0])


def kept(state: Path) -> dict[str, Any]:
    (path,) = (state / "machine").glob("attention-*.json")
    return dict(json.loads(path.read_text()))


def test_the_kernel_is_timed_once_kept_and_chosen_for_a_turn_from_its_costs(
    start_server: StartServer, tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    first = start(start_server, tiny_models, state)
    decision = chosen(first)
    assert decision["why"].startswith("timed on this machine: an agent's turn")
    assert TIMING in first.log()
    (costs,) = kept(state).values()
    for kernel in ("off", "on"):  # what the pass timed: reading and writing cost something
        reading, writing = turn_seconds(Costs(**costs[kernel]), Turn.of(8192), LAYERS)
        assert reading > 0 and writing > 0
    # the engine chose what the kept costs say for its model's layers and context
    context = int(re.findall(r"model tiny: context of (\d+) tokens", first.log())[-1])
    layers = block_count(tiny_models[1])
    expected = choose(Costs(**costs["off"]), Costs(**costs["on"]), Turn.of(context), layers)
    assert (decision["on"], decision["why"]) == (expected.flash, expected.why)
    assert f"flash attention {'on' if expected.flash else 'off'}" in first.log()
    first.stop()

    second = start(start_server, tiny_models, state)
    assert chosen(second) == decision
    assert TIMING not in second.log()


def test_the_model_entry_forces_either_kernel(
    start_server: StartServer, tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    forced = start(start_server, tiny_models, state, options={"flash_attn": True})
    assert chosen(forced) == {"on": True, "why": "the model entry says so (flash_attn)"}
    assert TIMING not in forced.log()
    assert "flash attention on" in forced.log()
    assert not list((state / "machine").glob("attention-*.json"))
