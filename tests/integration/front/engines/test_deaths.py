"""Engines that die inside llama.cpp, through the test seam (CODERAI_DIE_AT) that kills
the probe child or an engine at a chosen phase with a real signal: the machine's verdict
kept and reused, the healing restart, and each death named to the client in its API's
own error shape, to /healthz and to a request no engine can serve."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.integration.conftest import StartServer
from tests.support.server import Server, openai_client, wait_for

SIGILL = "died of SIGILL (illegal instruction)"
KEY = "deaths-admin-key"
ADMIN = {"Authorization": f"Bearer {KEY}"}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def gguf_models(tiny_models: tuple[Path, Path], **entry: Any) -> list[dict[str, Any]]:
    return [{"id": "tiny", "path": str(tiny_models[1]), **entry}]


def start(
    start_server: StartServer, tiny_models: tuple[Path, Path], die_at: str, state: Path,
    **entry: Any,
) -> Server:  # fmt: skip
    """One engine serving the tiny GGUF, its seam set, its state where the test says."""
    server = {"state_dir": str(state), "heartbeat_interval": 0.25}
    return start_server(server, gguf_models(tiny_models, **entry),
                        env={"CODERAI_DIE_AT": die_at},
                        extra_config={"auth": {"admin_key": KEY}})  # fmt: skip


def engine(srv: Server) -> dict[str, Any]:
    (view,) = srv.health()["engines"]
    return dict(view)


def back_on_the_bus(srv: Server, restarts: int) -> None:
    """Wait until the engine has been restarted `restarts` times and joined again."""
    wait_for(lambda: engine(srv)["restarts"] >= restarts and "pid" in engine(srv), 30)


def repack(srv: Server, model: str = "tiny") -> dict[str, Any]:
    """The engine's extra buffer types as its heartbeat reports them, once one reports
    the model's decision (a heartbeat after its load)."""

    def decided() -> bool:
        return model in engine(srv)["kernels"].get("extra_buffer_types", {}).get("models", {})

    wait_for(decided)
    return dict(engine(srv)["kernels"]["extra_buffer_types"])


def verdicts(state: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (state / "machine").glob("llamacpp-*.json")]


def ask(srv: Server) -> str:
    with openai_client(srv) as client:
        answer = client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=8)
    return answer.choices[0].message.content or ""


def test_the_machines_verdict_is_tried_once_kept_and_reused(
    start_server: StartServer, tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    state = tmp_path / "state"
    first = start(start_server, tiny_models, "", state)
    assert ask(first)
    machine = repack(first)["machine"]
    assert (machine["on"], machine["kept"]) == (True, False)
    assert machine["why"] == "a trial read a 512-token batch with them on"
    assert repack(first)["models"]["tiny"]["on"] is True
    (kept,) = verdicts(state)
    assert kept["works"] is True and kept["cpu"]
    first.stop()
    second = start(start_server, tiny_models, "", state)
    assert ask(second)
    assert repack(second)["machine"]["kept"] is True
    assert "this machine's verdict, kept in" in second.log()
    assert "trying them on this machine" not in second.log()


def test_a_machine_whose_trial_dies_of_sigill_serves_with_them_off(
    start_server: StartServer, tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    """The AMX Xeon as the seam simulates it: the trial traps, and so would any model with
    the extra buffer types on; with them off every model works."""
    state = tmp_path / "state"
    srv = start(start_server, tiny_models, "probe:SIGILL,prompt:SIGILL:repack", state)
    assert ask(srv)
    machine = repack(srv)["machine"]
    assert (machine["on"], machine["signal"]) == (False, "SIGILL")
    assert machine["why"] == f"a trial {SIGILL} reading a 512-token batch with them on"
    assert repack(srv)["models"]["tiny"]["on"] is False
    assert engine(srv)["restarts"] == 0 and engine(srv)["last_exit"] is None
    (kept,) = verdicts(state)
    assert (kept["works"], kept["signal"]) == (False, "SIGILL")


def test_a_death_with_them_on_restarts_the_engine_with_them_off_for_that_model(
    start_server: StartServer, tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    """The trial passes, a real prompt traps: the request that died with the engine runs
    again on its next incarnation, which loads the model with them off, and answers."""
    state = tmp_path / "state"
    srv = start(start_server, tiny_models, "prompt:SIGILL:repack", state)
    assert ask(srv)
    view = engine(srv)
    assert view["restarts"] == 1
    assert view["last_exit"]["message"].startswith(
        f"engine engine-0 {SIGILL} while reading a prompt"
    )
    assert view["last_exit"]["message"].endswith("for model 'tiny'")
    status = httpx.get(srv.url + "/admin/api/status", headers=ADMIN, timeout=10).json()
    assert status["engines"][0]["last_exit"] == view["last_exit"]
    healed = repack(srv)["models"]["tiny"]
    assert healed["on"] is False
    assert f"the engine {SIGILL} with them on for this model" in healed["why"]
    (heals,) = [json.loads(p.read_text()) for p in (state / "machine").glob("heals-*.json")]
    assert list(heals) == [str(tiny_models[1])]
    # healed once: it now serves without dying
    assert ask(srv)
    assert engine(srv)["restarts"] == 1


def _openai(srv: Server, stream: bool) -> str:
    with openai_client(srv) as client, pytest.raises(openai.APIError) as info:
        if stream:
            for _ in client.chat.completions.create(
                model="tiny", messages=QUESTION, max_tokens=64, stream=True
            ):
                pass
        else:
            client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=64)
    return str(info.value)


def _anthropic(srv: Server, stream: bool) -> str:
    messages: Any = QUESTION
    client = anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0)
    with client, pytest.raises(anthropic.APIError) as info:
        if stream:
            with client.messages.stream(model="tiny", max_tokens=64, messages=messages) as events:
                for _ in events:
                    pass
        else:
            client.messages.create(model="tiny", max_tokens=64, messages=messages)
    return str(info.value)


@pytest.mark.parametrize(
    ("die_at", "said", "stream"),
    [
        ("load:SIGBUS", "died of SIGBUS (bus error) while loading model 'tiny'", False),
        ("prompt:SIGILL", f"{SIGILL} while reading", False),
        (
            "generate:SIGSEGV",
            "died of SIGSEGV (segmentation fault) while generating for model 'tiny'",
            True,
        ),
    ],
)
def test_each_phase_of_a_death_is_named_to_both_apis_clients(
    start_server: StartServer,
    tiny_models: tuple[Path, Path],
    tmp_path: Path,
    die_at: str,
    said: str,
    stream: bool,
) -> None:
    srv = start(start_server, tiny_models, die_at, tmp_path / "state")
    for client in (_openai, _anthropic):
        restarts = engine(srv)["restarts"]
        message = client(srv, stream)
        # the request that died before its first token ran once more and died again
        # ("…not retried"), or met the engine backing off after its deaths ("…is
        # running: engine engine-0 died…; next try in N s"): both say how and where
        assert f"engine engine-0 {said}" in message, message
        assert "model 'tiny'" in message
        if "reading" in said:  # the engine's count of the prompt reached the front first
            assert re.search(r"while reading (this|a) prompt \(\d+ tokens\)", message), message
        back_on_the_bus(srv, restarts + 1)
    assert engine(srv)["last_exit"]["how"] == said.split(" while")[0]


def test_a_request_while_the_engine_is_down_names_how_it_died(
    start_server: StartServer, tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    """An engine that dies loading its model at every start flaps; a request for a model
    only it serves is told which engine, how it died and when it is tried again, never
    'no running engine can serve'."""
    server = {"state_dir": str(tmp_path / "state"), "heartbeat_interval": 0.25}
    srv = Server(tmp_path / "srv", {"engines": 1, **server},
                 gguf_models(tiny_models, load_mode="load"),
                 env={"CODERAI_DIE_AT": "load:SIGBUS"})  # fmt: skip
    try:
        srv.wait_ready(0)  # listening: its engine may never stay joined
        wait_for(lambda: srv.health()["engines"][0]["flapping"], 60)
        with openai_client(srv) as client, pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=4)
        message = info.value.message
        assert "no engine that serves 'gguf' models is running: engine engine-0" in message
        assert "died of SIGBUS (bus error) while loading model 'tiny'" in message
        assert "times in a row at start" in message
        assert "no running engine can serve" not in message
        assert "died of SIGBUS (bus error)" in srv.log()
    finally:
        srv.stop()
