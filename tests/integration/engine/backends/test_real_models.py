"""The transformers and llama.cpp backends behind the full stack, on tiny real models."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from coderai.bus.messages import Job, ModelSpec
from coderai.engine.backends.base import END, PENDING, LoadProgress, ModelInstance, Sequence
from coderai.engine.backends.llamacpp.backend import LlamaCppBackend
from coderai.engine.backends.transformers.backend import TransformersBackend
from tests.support.prompts import PROMPTS
from tests.support.server import Server, wait_for
from tests.support.sse import content, events
from tests.support.tinymodel import CONTEXT

TOKENS = 24
#: one tiny-model token (in both tokenizers) per repetition, to build prompts of exact size
TOKEN = " token"


@pytest.fixture(scope="module")
def models(
    tiny_models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    hf, gguf = tiny_models
    broken = tmp_path_factory.mktemp("broken")
    corrupt = broken / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + b"\x00" * 64)
    return [
        {"id": "tiny-hf", "path": str(hf)},
        {"id": "tiny-gguf", "path": str(gguf), "options": {"kv_cache": "f32"}},
        {"id": "tiny-gguf-tf", "path": str(gguf), "options": {"backend": "transformers"}},
        {"id": "tiny-gguf-1k", "path": str(gguf), "options": {"n_ctx": 2 * CONTEXT}},
        {"id": "missing", "path": str(broken / "nowhere.gguf")},
        {"id": "corrupt", "path": str(corrupt)},
    ]


@pytest.fixture(scope="module")
def server(
    models: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    cache = tmp_path_factory.mktemp("cache")
    srv = Server(
        tmp_path_factory.mktemp("real"),
        {"engines": 1, "max_parallel_requests": 16},
        models,
        env={"CODERAI_CACHE_DIR": str(cache)},
    )
    try:
        srv.wait_ready(1)
        yield srv
    finally:
        srv.stop()


def chat(srv: Server, model: str, content: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": content}],
            "temperature": 0, "max_tokens": TOKENS, **extra}  # fmt: skip
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=120)


def complete(srv: Server, model: str, prompt: str, max_tokens: int) -> httpx.Response:
    body = {"model": model, "prompt": prompt, "temperature": 0, "max_tokens": max_tokens}
    return httpx.post(srv.url + "/v1/completions", json=body, timeout=120)


def embed(srv: Server, model: str, inputs: list[str]) -> httpx.Response:
    body = {"model": model, "input": inputs}
    return httpx.post(srv.url + "/v1/embeddings", json=body, timeout=60)


def text_of(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    content: str = r.json()["choices"][0]["message"]["content"]
    return content


def direct(instance: ModelInstance, content: str) -> tuple[str, int, int]:
    """The same request run on the backend in this process, with no bus in between:
    (text, prompt tokens, completion tokens)."""
    job = Job(1, {}, "chat", messages=[{"role": "user", "content": content}], temperature=0)
    seq = Sequence(job=job)
    instance.start(seq)
    pieces: list[str] = []
    while len(pieces) < TOKENS:
        (result,) = instance.step([seq])
        if result is PENDING:  # still reading its prompt
            continue
        if result is END:
            break
        assert isinstance(result, str)
        pieces.append(result)
    instance.release(seq)
    return "".join(pieces), seq.prompt_tokens, len(pieces)


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_greedy_text_through_the_stack_equals_the_backend_called_directly(
    server: Server, models: list[dict[str, Any]], model: str
) -> None:
    spec = next(m for m in models if m["id"] == model)
    backend = TransformersBackend() if model == "tiny-hf" else LlamaCppBackend()
    entry = {"path": "", **spec, "options": spec.get("options", {})}
    instance = backend.load(
        ModelSpec.parse({**entry, "format": "gguf" if model == "tiny-gguf" else "transformers"}),
        LoadProgress(),
    )
    for prompt in PROMPTS:
        r = chat(server, model, prompt)
        usage = r.json()["usage"]
        assert (text_of(r), usage["prompt_tokens"], usage["completion_tokens"]) == direct(
            instance, prompt
        )


def test_transformers_and_llamacpp_give_the_same_greedy_text(server: Server) -> None:
    for prompt in PROMPTS:
        via_transformers = text_of(chat(server, "tiny-hf", prompt))
        assert len(via_transformers) > 10
        assert text_of(chat(server, "tiny-gguf", prompt)) == via_transformers


def test_a_gguf_file_runs_on_the_transformers_backend_too(server: Server) -> None:
    assert text_of(chat(server, "tiny-gguf-tf", PROMPTS[0])) == text_of(
        chat(server, "tiny-hf", PROMPTS[0])
    )


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_streamed_text_equals_the_whole_response(server: Server, model: str) -> None:
    whole = text_of(chat(server, model, "stream please"))
    body = {"model": model, "messages": [{"role": "user", "content": "stream please"}],
            "temperature": 0, "max_tokens": TOKENS, "stream": True}  # fmt: skip
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        streamed = content(events(r.read()))
    assert streamed == whole


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_stop_sequences_cut_real_model_text(server: Server, model: str) -> None:
    full = text_of(chat(server, model, PROMPTS[1]))
    stop = full[8:12]
    cut = chat(server, model, PROMPTS[1], stop=[stop]).json()["choices"][0]
    assert cut["message"]["content"] == full[: full.index(stop)]
    assert cut["finish_reason"] == "stop"


async def concurrently(srv: Server, bodies: list[dict[str, Any]]) -> list[str]:
    """Chat requests sent at once; their texts in order."""
    async with aiohttp.ClientSession() as session:

        async def one(body: dict[str, Any]) -> str:
            async with session.post(srv.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
                data = await r.json()
                return str(data["choices"][0]["message"]["content"])

        return await asyncio.gather(*(one(b) for b in bodies))


def chat_body(model: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}],
            "temperature": 0, "max_tokens": TOKENS, **extra}  # fmt: skip


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_eight_concurrent_requests_each_give_their_text_alone(server: Server, model: str) -> None:
    """One transformers batch, or one llama.cpp context running several sequences."""
    prompts = [f"{p} #{i}" for i, p in enumerate(PROMPTS + PROMPTS[:3])]
    sequential = [text_of(chat(server, model, p)) for p in prompts]
    together = asyncio.run(concurrently(server, [chat_body(model, p) for p in prompts]))
    assert together == sequential


def test_a_seeded_llamacpp_request_repeats_beside_others_and_an_unseeded_one_varies(
    server: Server,
) -> None:
    seeded = chat_body("tiny-gguf", PROMPTS[0], temperature=1.0, seed=7)
    alone = text_of(chat(server, "tiny-gguf", PROMPTS[0], temperature=1.0, seed=7))
    beside = [chat_body("tiny-gguf", p, temperature=1.0) for p in PROMPTS[1:4]]
    again, *_ = asyncio.run(concurrently(server, [seeded, *beside]))
    assert again == alone
    # after a seeded request, unseeded ones draw their own seeds (once, the seed stuck)
    unseeded = [text_of(chat(server, "tiny-gguf", PROMPTS[0], temperature=1.0)) for _ in range(3)]
    assert len(set(unseeded)) > 1


def test_a_llamacpp_engine_reports_its_sequences_and_kv_cells(server: Server) -> None:
    assert text_of(chat(server, "tiny-gguf", PROMPTS[0]))

    def counters() -> dict[str, int]:
        models: dict[str, dict[str, int]] = server.health()["engines"][0].get("models", {})
        return models.get("tiny-gguf", {})

    wait_for(lambda: counters().get("kv_cells"), 30)
    seen = counters()
    # the tiny GGUF's trained context fits the memory: it is the context made
    assert seen["kv_cells"] == CONTEXT
    metrics = httpx.get(server.url + "/metrics", timeout=10).text
    engine = server.health()["engines"][0]["name"]
    assert f'coderai_kv_cells{{engine="{engine}",model="tiny-gguf"}} {CONTEXT}.0' in metrics


@pytest.mark.parametrize(("model", "dims"), [("tiny-hf", 64), ("tiny-gguf", 64)])
def test_embeddings(server: Server, model: str, dims: int) -> None:
    r = httpx.post(
        server.url + "/v1/embeddings",
        json={"model": model, "input": ["hello", "world"]},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(len(d["embedding"]) == dims for d in body["data"])
    assert body["data"][0]["embedding"] != body["data"][1]["embedding"]
    assert body["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_a_context_that_fills_ends_with_length_and_the_text_so_far(
    server: Server, model: str
) -> None:
    room = 10
    r = complete(server, model, TOKEN * (CONTEXT - room), max_tokens=5 * room)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["text"]
    assert body["usage"] == {
        "prompt_tokens": CONTEXT - room,
        "completion_tokens": room,
        "total_tokens": CONTEXT,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_a_prompt_that_leaves_no_room_in_the_context_is_400(server: Server, model: str) -> None:
    r = complete(server, model, TOKEN * CONTEXT, max_tokens=1)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded"  # what agents look for
    message = error["message"]
    assert message == (
        f"This model's maximum context length is {CONTEXT} tokens. However, your prompt"
        f" resulted in {CONTEXT} tokens. Please reduce the length of the prompt."
    )


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_an_embedding_input_longer_than_the_model_embeds_is_400_naming_it(
    server: Server, model: str
) -> None:
    r = embed(server, model, ["hello", TOKEN * (CONTEXT + 1)])
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert message == f"input[1] has {CONTEXT + 1} tokens; this model embeds at most {CONTEXT}"


def test_llamacpp_embeds_a_whole_input_up_to_its_n_ctx(server: Server) -> None:
    # longer than llama.cpp's default batch of 512 tokens, which used to cut it there
    r = embed(server, "tiny-gguf-1k", [TOKEN * (2 * CONTEXT)])
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 2 * CONTEXT


@pytest.mark.parametrize(
    ("model", "file"), [("missing", "nowhere.gguf"), ("corrupt", "corrupt.gguf")]
)
def test_a_broken_model_file_is_named_and_the_engine_keeps_serving(
    server: Server, model: str, file: str
) -> None:
    pid = server.health()["engines"][0]["pid"]
    r = chat(server, model, "hi")
    assert r.status_code == 503
    assert file in r.json()["error"]["message"]
    assert text_of(chat(server, "tiny-hf", "still there?"))
    assert server.health()["engines"][0]["pid"] == pid


def test_a_resent_conversation_reports_its_cached_tokens_and_answers_the_same(
    server: Server,
) -> None:
    # prompt and answer are kept (the cache may hold as much as the context)
    turn = "Servers answer requests, one after another, all day long. " * 2
    first = chat(server, "tiny-gguf", turn).json()
    again = chat(server, "tiny-gguf", turn).json()
    assert first["choices"][0]["message"] == again["choices"][0]["message"]
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == again["usage"]["prompt_tokens"] - 1


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
@pytest.mark.parametrize("narrow", [{"top_k": 1}, {"min_p": 1.0}])
def test_top_k_and_min_p_are_honoured(server: Server, model: str, narrow: dict[str, Any]) -> None:
    """Either left alone keeps only the likeliest token: sampling at temperature 1 then
    gives the greedy text, whatever the seed."""
    greedy = text_of(chat(server, model, PROMPTS[2]))
    sampled = {text_of(chat(server, model, PROMPTS[2], temperature=1.0, seed=s, **narrow))
               for s in (1, 2)}  # fmt: skip
    assert sampled == {greedy}


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_penalties_change_greedy_text(server: Server, model: str) -> None:
    """The tiny models repeat themselves: a penalty on what was generated changes that."""
    plain = text_of(chat(server, model, PROMPTS[0]))
    for penalty in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0}):
        assert text_of(chat(server, model, PROMPTS[0], **penalty)) != plain


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_logit_bias_forces_a_token(server: Server, model: str) -> None:
    text = text_of(chat(server, model, PROMPTS[1], logit_bias={"70": 100}))
    piece = text[: len(text) // TOKENS]
    assert piece and text == piece * TOKENS  # one token, every time


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_a_logit_bias_token_the_model_lacks_is_a_400(server: Server, model: str) -> None:
    r = chat(server, model, PROMPTS[1], logit_bias={"999999": 5})
    assert r.status_code == 400, r.text
    assert "token 999999" in r.json()["error"]["message"]


@pytest.mark.parametrize("model", ["tiny-hf", "tiny-gguf"])
def test_a_conversation_too_long_for_the_context_gets_openais_code_and_wording(
    server: Server, model: str
) -> None:
    r = chat(server, model, TOKEN * CONTEXT)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["message"].startswith(f"This model's maximum context length is {CONTEXT} tokens.")
    assert "However, your messages resulted in" in error["message"]
