"""`coderai run` with two engines, driven by the official openai client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from coderai.engine.backends.fake import fake_tokens
from tests.support.server import Server, expected_chat, wait_for
from tests.support.sse import DONE, events, is_error

MODELS: list[dict[str, Any]] = [
    {"id": "fake", "alias": "fake-alias", "format": "fake", "options": {"output_tokens": 24}},
    {"id": "slow", "format": "fake", "options": {"tokens_per_second": 20, "output_tokens": 400}},
    {"id": "flaky", "format": "fake", "options": {"fail_after_tokens": 3, "tokens_per_second": 50}},
    {"id": "weights.gguf", "path": "/nonexistent/weights.gguf", "format": "gguf"},
]


@pytest.fixture(scope="module", params=["multi-process", "single-process"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The same API suite against both modes (single-process runs the first engine only)."""
    single = request.param == "single-process"
    # engines declared able to run only the fake backend: the GGUF entry has no engine
    specs = [{"name": f"engine-{i}", "backend": "cpu", "capabilities": ["fake"]} for i in (0, 1)]
    config = {"engine_specs": specs, "single_process": single}
    srv = Server(tmp_path_factory.mktemp("openai"), config, MODELS)
    try:
        srv.wait_ready(1 if single else 2)
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as c:
        yield c


def _user(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


def test_model_list_is_the_catalogue(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids == ["fake", "slow", "flaky", "weights.gguf"]


def test_a_model_is_retrieved_by_id_or_alias_and_an_unknown_one_is_404(
    client: openai.OpenAI,
) -> None:
    assert client.models.retrieve("fake").id == "fake"
    assert client.models.retrieve("fake-alias").id == "fake-alias"
    assert client.models.retrieve("weights.gguf").object == "model"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("org/none")
    assert caught.value.code == "model_not_found"


def test_health_answers_as_vllm_and_llama_cpp_do(server: Server) -> None:
    r = httpx.get(server.url + "/health", timeout=10)
    assert (r.status_code, r.json()) == (200, {"status": "ok"})


def test_a_whole_chat_message_carries_refusal_null(server: Server) -> None:
    body = {"model": "fake", "messages": _user("hello")}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=10)
    message = r.json()["choices"][0]["message"]
    assert "refusal" in message and message["refusal"] is None


def test_chat_whole_response(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="fake", messages=_user("hello"))
    completion = raw.parse()
    assert raw.headers["x-coderai-engine"] in {"engine-0", "engine-1"}
    assert completion.object == "chat.completion"
    assert completion.model == "fake"
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == expected_chat("hello", 24)
    assert choice.finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 24
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 24


def test_chat_stream_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="fake-alias",
        messages=_user("stream me"),
        stream=True,
        stream_options={"include_usage": True},
        max_tokens=10,
        seed=7,
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected_chat("stream me", 10, seed=7)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length"
    assert set(finishes[:-1]) == {None}
    usage_chunk = chunks[-1]
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens == 10
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


def test_completion_whole_and_streamed_agree(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="fake", prompt="Once", max_tokens=12)
    assert whole.object == "text_completion"
    assert whole.choices[0].text == "".join(fake_tokens("Once", 0, 12))
    assert whole.choices[0].finish_reason == "length"
    streamed = client.completions.create(model="fake", prompt="Once", max_tokens=12, stream=True)
    assert "".join(c.choices[0].text for c in streamed) == whole.choices[0].text


def test_echo_sends_the_prompt_back_ahead_of_the_completion(client: openai.OpenAI) -> None:
    text = "".join(fake_tokens("Once", 0, 12))
    whole = client.completions.create(model="fake", prompt="Once", max_tokens=12, echo=True)
    assert whole.choices[0].text == "Once" + text
    assert whole.usage is not None and whole.usage.completion_tokens == 12
    streamed = client.completions.create(
        model="fake", prompt="Once", max_tokens=12, echo=True, stream=True
    )
    events = [c.choices[0].text for c in streamed]
    assert events[0] == "Once" and "".join(events) == "Once" + text


def test_the_user_field_is_recorded_in_the_log(server: Server, client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="fake", messages=_user("hi"), max_tokens=2, user="alice-7"
    )
    wait_for(lambda: f"{answer.id} for user 'alice-7'" in server.log())


def test_several_prompts_with_n_choices_each_in_order(client: openai.OpenAI) -> None:
    """Choice p * n + i is choice i of prompt p; a seeded request seeds choice i with
    seed + i, so each prompt's choices differ and each can be computed."""
    prompts = ["Once", "Twice", "Thrice"]
    want = [
        "".join(fake_tokens(p, 7 + i, 6)) for p in prompts for i in range(2)
    ]  # fmt: skip
    whole = client.completions.create(
        model="fake", prompt=prompts, n=2, seed=7, max_tokens=6, echo=True
    )
    assert [c.index for c in whole.choices] == list(range(6))
    assert [c.text for c in whole.choices] == [p + w for p, w in zip(
        [p for p in prompts for _ in range(2)], want, strict=True)]  # fmt: skip
    assert whole.usage is not None and whole.usage.completion_tokens == 36
    streamed: dict[int, str] = {}
    for chunk in client.completions.create(
        model="fake", prompt=prompts, n=2, seed=7, max_tokens=6, stream=True
    ):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert [streamed[i] for i in range(6)] == want


def test_stop_sequence_ends_the_text_before_it(client: openai.OpenAI) -> None:
    full = "".join(fake_tokens("Once", 0, 24))
    stop = full[20:26]
    out = client.completions.create(model="fake", prompt="Once", max_tokens=24, stop=[stop])
    assert out.choices[0].text == full[: full.index(stop)]
    assert out.choices[0].finish_reason == "stop"


def test_invalid_body_is_400(server: Server) -> None:
    r = httpx.post(server.url + "/v1/chat/completions", content=b"{not json")
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert r.headers["x-coderai-engine"] == "front"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "fake", "messages": _user("x"), "n": 17}, "n"),
        ({"model": "fake", "messages": []}, "messages"),
        ({"model": "fake", "messages": _user("x"), "temperature": 5}, "temperature"),
        ({"model": "fake", "messages": _user("x"), "max_tokens": 0}, "max_tokens"),
        ({"model": "fake", "messages": _user("x"), "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": "fake", "messages": _user("x"), "stream_options": {}}, "stream_options"),
        ({"messages": _user("x")}, "model"),
    ],
)
def test_bad_parameters_are_400_naming_the_parameter(
    server: Server, body: dict[str, object], param: str
) -> None:
    r = httpx.post(server.url + "/v1/chat/completions", json=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]


def test_unknown_model_is_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="no-such-model", messages=_user("x"))
    assert isinstance(info.value.body, dict)
    assert info.value.body["code"] == "model_not_found"


def test_model_no_engine_can_run_is_503(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="weights.gguf", messages=_user("x"))
    assert info.value.status_code == 503
    assert "no running engine can serve 'gguf' models" in info.value.message


def test_failure_before_any_token_is_a_status(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="flaky", messages=_user("x"))
    assert info.value.status_code == 503
    assert "failed after 3 tokens" in info.value.message


def test_failure_after_first_byte_is_an_error_event(server: Server) -> None:
    body = {"model": "flaky", "messages": _user("x"), "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        evs = events(r.read())
    assert is_error(evs[-1])
    assert "failed after 3 tokens" in evs[-1]["error"]["message"]
    assert DONE not in evs


def test_openai_client_raises_on_error_event(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="flaky", messages=_user("x"), stream=True)
    with pytest.raises(openai.APIError, match="failed after 3 tokens"):
        list(stream)


def test_full_queue_is_429_with_retry_after(tmp_path: Path) -> None:
    slow = {"id": "slow", "format": "fake", "options": {"tokens_per_second": 20}}
    srv = Server(tmp_path, {"engines": 1, "max_parallel_requests": 1, "max_queue": 1}, [slow])
    try:
        srv.wait_ready(1)
        body = {"model": "slow", "prompt": "x", "max_tokens": 10, "stream": True}
        started = threading.Barrier(3)
        statuses: list[int] = []

        def occupy() -> None:
            with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=30) as r:
                started.wait()
                statuses.append(r.status_code)
                r.read()

        threads = [threading.Thread(target=occupy) for _ in range(2)]
        threads[0].start()
        wait_for(lambda: srv.health()["engines"][0]["free_slots"] == 0)
        threads[1].start()
        wait_for(lambda: srv.health()["queued"] == 1)
        with (
            openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0) as c,
            pytest.raises(openai.RateLimitError) as info,
        ):
            c.completions.create(model="slow", prompt="x", max_tokens=5)
        assert info.value.response.headers["retry-after"] == "1"
        assert info.value.response.headers["x-coderai-engine"] == "front"
        started.wait(timeout=30)
        for t in threads:
            t.join(30)
        assert statuses == [200, 200]
    finally:
        srv.stop()


def test_embeddings_from_a_model_without_them_is_400(server: Server) -> None:
    r = httpx.post(server.url + "/v1/embeddings", json={"model": "fake", "input": "hi"})
    assert r.status_code == 400
    assert "embeddings" in r.json()["error"]["message"]


def test_embeddings_request_is_validated(server: Server) -> None:
    r = httpx.post(server.url + "/v1/embeddings", json={"model": "fake", "input": []})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "input"
