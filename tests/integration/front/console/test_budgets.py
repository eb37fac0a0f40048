"""Token budgets and weights of API keys against a real `coderai run`: the cap answered
429 in each API's own shape through the official SDKs, the reset time, a change applied
to the next request, usage in the console and /metrics, and spending kept over a restart."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from coderai.front.auth.budgets import day_reset
from tests.integration.front.console.test_console_auth import (
    KEY,
    MODELS,
    admin,
    coderai,
    new_key,
)
from tests.support.server import Server

ASK = [{"role": "user", "content": "x"}]


def start(workdir: Path) -> Server:
    auth = {"admin_key": KEY, "require_api_key": True}
    server = Server(workdir, {"engines": 1}, MODELS, extra_config={"auth": auth})
    server.wait_ready(1)
    return server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(tmp_path_factory.mktemp("budgets"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def clients() -> Iterator[list[openai.OpenAI | anthropic.Anthropic]]:
    made: list[openai.OpenAI | anthropic.Anthropic] = []
    yield made
    for client in made:
        client.close()


def oai(srv: Server, key: dict[str, Any], made: list[Any]) -> openai.OpenAI:
    made.append(openai.OpenAI(base_url=srv.url + "/v1", api_key=key["key"], max_retries=0))
    return made[-1]  # type: ignore[no-any-return]


def listed(srv: Server, key_id: str) -> dict[str, Any]:
    with admin(srv) as client:
        keys = client.get("/admin/api/keys").json()["keys"]
    (found,) = [k for k in keys if k["id"] == key_id]
    return found  # type: ignore[no-any-return]


def test_a_spent_daily_budget_is_refused_in_each_apis_shape_until_midnight(
    srv: Server, clients: list[Any]
) -> None:
    key = new_key(srv, tokens_per_day=10)  # one answer of 8 tokens and its prompt spend it
    client = oai(srv, key, clients)
    answer = client.chat.completions.create(model="small", messages=ASK)  # type: ignore[arg-type]
    assert answer.usage is not None and answer.usage.total_tokens >= 10
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="small", messages=ASK)  # type: ignore[arg-type]
    now = time.time()
    error = refused.value
    assert error.status_code == 429
    assert error.code == "insufficient_quota" and error.type == "insufficient_quota"
    until_midnight = day_reset(now) - now
    assert until_midnight - 5 <= int(error.response.headers["Retry-After"]) <= until_midnight + 5
    assert "tokens today (UTC)" in error.message and "T00:00:00Z" in error.message
    assert error.response.headers["x-should-retry"] == "false"
    # an SDK left to retry (its default) does not: the refusal lasts until the reset
    refusals = 'coderai_requests_total{route="/v1/chat/completions",status="429"}'
    before = srv.metric(refusals)
    retrying = openai.OpenAI(base_url=srv.url + "/v1", api_key=key["key"])
    clients.append(retrying)
    with pytest.raises(openai.RateLimitError):
        retrying.chat.completions.create(model="small", messages=ASK)  # type: ignore[arg-type]
    assert srv.metric(refusals) == before + 1
    # reading the model list spends nothing, and is not refused
    assert [m.id for m in client.models.list()]
    claude = anthropic.Anthropic(base_url=srv.url, api_key=key["key"], max_retries=0)
    clients.append(claude)
    with pytest.raises(anthropic.RateLimitError) as also:
        claude.messages.create(model="small", max_tokens=8, messages=ASK)  # type: ignore[arg-type]
    body = also.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "rate_limit_error"
    assert "its budget resets at" in body["error"]["message"]
    assert int(also.value.response.headers["Retry-After"]) >= until_midnight - 5
    shown = listed(srv, key["id"])
    assert shown["tokens_per_day"] == 10
    assert shown["tokens_today"] == shown["tokens_this_month"] == answer.usage.total_tokens


def test_raising_a_budget_applies_to_the_keys_next_request(srv: Server, clients: list[Any]) -> None:
    key = new_key(srv, tokens_per_month=10)
    client = oai(srv, key, clients)
    client.chat.completions.create(model="small", messages=ASK)  # type: ignore[arg-type]
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="small", messages=ASK)  # type: ignore[arg-type]
    assert "this month (UTC)" in refused.value.message
    with admin(srv) as c:
        changed = c.patch(f"/admin/api/keys/{key['id']}", json={"tokens_per_month": 1_000})
        assert changed.status_code == 200, changed.text
        assert changed.json()["tokens_per_month"] == 1_000
        assert c.patch(f"/admin/api/keys/{key['id']}", json={"weight": 0}).status_code == 400
        assert c.patch(f"/admin/api/keys/{key['id']}", json={"budget": 5}).status_code == 400
        assert c.patch("/admin/api/keys/000000000000", json={"rpm": 5}).status_code == 404
    client.chat.completions.create(model="small", messages=ASK)  # type: ignore[arg-type]


def test_usage_per_key_and_model_is_in_metrics(srv: Server, clients: list[Any]) -> None:
    key = new_key(srv)
    answer = oai(srv, key, clients).chat.completions.create(model="other", messages=ASK)  # type: ignore[arg-type]
    assert answer.usage is not None
    labels = f'key="{key["id"]}",model="other"'
    # counted as the request ended, before its answer was sent
    assert srv.metric(f"coderai_key_requests_total{{{labels}}}") == 1
    tokens = 'coderai_key_tokens_total{{key="{}",kind="{}",model="other"}}'
    completion = srv.metric(tokens.format(key["id"], "completion"))
    prompt = srv.metric(tokens.format(key["id"], "prompt"))
    assert (prompt, completion) == (answer.usage.prompt_tokens, answer.usage.completion_tokens)


def test_budgets_and_weights_set_from_the_command_line(srv: Server) -> None:
    token = coderai(srv.workdir, "keys", "create", "cli", "--tokens-per-month", "500",
                    "--weight", "3").strip()  # fmt: skip
    key_id = token.split("-")[1]
    made = listed(srv, key_id)
    assert (made["tokens_per_month"], made["weight"]) == (500, 3.0)
    shown = json.loads(coderai(srv.workdir, "keys", "set", key_id, "--tokens-per-month", "none",
                               "--tokens-per-day", "20", "--weight", "none"))  # fmt: skip
    assert (shown["tokens_per_month"], shown["tokens_per_day"], shown["weight"]) == (None, 20, 1.0)
    with pytest.raises(subprocess.CalledProcessError) as refused:
        coderai(srv.workdir, "keys", "set", key_id, "--weight", "0")
    assert "--weight must be from 0.01 to 100" in refused.value.stderr


def test_a_keys_spending_is_kept_over_a_restart(tmp_path: Path, clients: list[Any]) -> None:
    first = start(tmp_path)
    try:
        key = new_key(first, tokens_per_day=10)
        oai(first, key, clients).chat.completions.create(model="small", messages=ASK)  # type: ignore[arg-type]
    finally:
        first.stop()  # usage is written at shutdown
    second = start(tmp_path)
    try:
        with pytest.raises(openai.RateLimitError):
            oai(second, key, clients).chat.completions.create(model="small", messages=ASK)  # type: ignore[arg-type]
        assert listed(second, key["id"])["tokens_today"] >= 10
    finally:
        second.stop()
