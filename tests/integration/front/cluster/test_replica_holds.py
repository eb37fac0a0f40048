"""Engines tell what they hold (engine/holdings.py) and the front routes by it: a head
with one model on two remote engines (the real llama.cpp backend on the tiny GGUF)
restarts and forgets where each conversation went; the engines, still running, name the
conversations whose prefixes they hold in their heartbeats, and each conversation's next
turn goes back to the engine that holds it, read from its cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.integration.front.cluster.test_cluster import ENGINES, INTERVAL, KEY, Rig
from tests.support.server import free_port, serving, wait_for

AGENTS = 4


def models(gguf: Path) -> list[dict[str, Any]]:
    # flash attention named, so that neither engine times the kernels (2 cores, shared);
    # the KV cache alone keeps each engine's two conversations
    options = {"n_ctx": 1024, "flash_attn": False, "prompt_cache_ram_mb": 0}
    return [{"id": "tiny", "path": str(gguf), "format": "gguf", "engines": ["far1", "far2"],
             "options": options}]  # fmt: skip


def turn(url: str, agent: int, n: int) -> tuple[str, int]:
    """One turn of an agent's conversation: the engine that answered, and the prompt
    tokens read from its cache. Each system prompt is past a lead (256 tokens)."""
    system = f"Agent {agent}. " + "Servers answer requests " * 30
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "start"}]
    for i in range(n):
        messages += [{"role": "assistant", "content": f"step {i}"},
                     {"role": "user", "content": f"go on {i}"}]  # fmt: skip
    body = {"model": "tiny", "max_tokens": 2, "temperature": 0, "messages": messages}
    answer = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    cached = answer.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    return answer.headers["X-CoderAI-Engine"], cached


def test_after_the_head_restarts_each_conversation_goes_back_to_the_engine_holding_it(
    tmp_path: Path, tiny_models: tuple[Path, Path]
) -> None:
    bind = f"tcp://127.0.0.1:{free_port()}"
    config = {"engine_specs": ENGINES, "heartbeat_interval": INTERVAL}
    extra = {"cluster": {"bind": bind}}
    catalogue = models(tiny_models[1])
    with serving(tmp_path / "head", config, catalogue, 1, KEY, extra_config=extra) as srv:
        rig = Rig(srv, bind)
        try:
            for name in ("far1", "far2"):
                secret = rig.keys(name)
                rig.cli("allow", str(secret.with_name(f"{name}.key")), "--name", name)
                rig.engine(name, secret, capabilities="gguf")
            wait_for(lambda: {"far1", "far2"} <= set(rig.engines()), timeout=30)
            homes = {agent: turn(srv.url, agent, 0)[0] for agent in range(AGENTS)}
            assert sorted(homes.values()) == ["far1", "far1", "far2", "far2"], homes

            def holding() -> dict[str, int]:
                return {n: e["holds"].get("tiny", 0) for n, e in rig.engines().items()}

            # each names the two conversations it served, in its heartbeat
            wait_for(lambda: holding() == {"local": 0, "far1": 2, "far2": 2}, timeout=30)
            srv.stop()
            with serving(srv.workdir, config, catalogue, 1, KEY, extra_config=extra) as again:
                rig.srv = again
                # the engines join the new head (after the old one's liveness) and tell
                # again what they hold: the head itself remembers no conversation
                wait_for(lambda: holding() == {"local": 0, "far1": 2, "far2": 2}, timeout=30)
                # in the reverse order: spread as new conversations, each would go to
                # the engine that did not serve it
                for agent in reversed(range(AGENTS)):
                    engine, cached = turn(again.url, agent, 1)
                    assert engine == homes[agent], (agent, engine, homes)
                    assert cached >= 256  # its system prompt, at least, from the cache
        finally:
            rig.close()
