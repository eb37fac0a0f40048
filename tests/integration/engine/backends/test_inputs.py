"""Inputs clients really send, on tiny real models through both backends: token-id prompts
and embedding inputs, fill-in-the-middle completions, /tokenize and /detokenize."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from coderai.bus.messages import Job, ModelSpec
from coderai.engine.backends.base import LoadProgress, Sequence
from coderai.engine.backends.llamacpp.backend import LlamaCppBackend
from coderai.engine.backends.llamacpp.batch import LlamaCppBatchInstance
from coderai.engine.backends.transformers.backend import TransformersBackend, TransformersInstance
from tests.support.server import Server, openai_client, running
from tests.support.tinymodel import CONTEXT, FIM_TOKENS, build

PROMPT = "The quick brown fox"
#: a fill-in-the-middle request: the code before the gap, and after it
BEFORE, AFTER = "def capital(country):\n    ", "\n    return answer"
BOTH = ["tiny-hf", "tiny-gguf"]
GGUF_OPTIONS = {"n_ctx": CONTEXT, "kv_cache": "f32"}


@pytest.fixture(scope="module")
def fim_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny model's variant with fill-in-the-middle tokens, for transformers and GGUF."""
    return build(tmp_path_factory.mktemp("tiny-fim"), fim=True)


@pytest.fixture(scope="module")
def server(
    tiny_models: tuple[Path, Path],
    fim_models: tuple[Path, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    (hf, gguf), (fim_hf, fim_gguf) = tiny_models, fim_models
    models: list[dict[str, Any]] = [
        {"id": "tiny-hf", "path": str(hf)},
        {"id": "tiny-gguf", "path": str(gguf), "options": GGUF_OPTIONS},
        {"id": "fim-hf", "path": str(fim_hf)},
        {"id": "fim-gguf", "path": str(fim_gguf), "options": GGUF_OPTIONS},
    ]
    cache = tmp_path_factory.mktemp("cache")
    with running(tmp_path_factory.mktemp("inputs"), models, cache) as srv:
        yield srv


@pytest.fixture
def client(server: Server) -> Iterator[openai.OpenAI]:
    with openai_client(server) as c:
        yield c


def _tokenizer(folder: Path) -> Any:
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def post(srv: Server, route: str, **body: Any) -> httpx.Response:
    return httpx.post(srv.url + route, json=body, timeout=60)


def tokens(srv: Server, model: str, **body: Any) -> list[int]:
    r = post(srv, "/tokenize", model=model, **body)
    assert r.status_code == 200, r.text
    ids: list[int] = r.json()["tokens"]
    return ids


def complete(client: openai.OpenAI, model: str, prompt: Any, **extra: Any) -> Any:
    return client.completions.create(
        model=model, prompt=prompt, temperature=0, max_tokens=8, **extra
    )


def fim_ids(folder: Path) -> list[int]:
    """The prompt a FIM request must become: PRE, the prompt, SUF, the suffix, MID."""
    tokenizer = _tokenizer(folder)
    pre, suf, mid = tokenizer.convert_tokens_to_ids(FIM_TOKENS)

    def encode(text: str) -> list[int]:
        ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    return [pre, *encode(BEFORE), suf, *encode(AFTER), mid]


# -- token-id prompts and inputs --------------------------------------------------------------
@pytest.mark.parametrize("model", BOTH)
def test_a_prompt_of_token_ids_completes_as_its_text_does(
    server: Server, client: openai.OpenAI, model: str
) -> None:
    ids = tokens(server, model, prompt=PROMPT)
    by_text = complete(client, model, PROMPT)
    by_ids = complete(client, model, ids)
    assert by_text.choices[0].text
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert by_ids.usage.prompt_tokens == len(ids)
    nested = post(server, "/v1/completions", model=model, prompt=[ids], temperature=0, max_tokens=8)
    assert nested.json()["choices"][0]["text"] == by_text.choices[0].text


@pytest.mark.parametrize("model", BOTH)
def test_embeddings_of_token_ids_equal_those_of_their_texts(
    server: Server, client: openai.OpenAI, model: str
) -> None:
    texts = [PROMPT, "Paris is the capital of France"]
    ids = [tokens(server, model, prompt=text) for text in texts]
    by_text = client.embeddings.create(model=model, input=texts)
    by_ids = client.embeddings.create(model=model, input=ids)
    one = client.embeddings.create(model=model, input=ids[0])
    assert [d.embedding for d in by_ids.data] == [d.embedding for d in by_text.data]
    assert one.data[0].embedding == by_text.data[0].embedding
    assert by_ids.usage.prompt_tokens == sum(len(i) for i in ids)


@pytest.mark.parametrize("model", BOTH)
def test_a_token_id_outside_the_vocabulary_is_a_400_naming_it(
    server: Server, client: openai.OpenAI, model: str
) -> None:
    with pytest.raises(openai.BadRequestError, match="token id 99999"):
        complete(client, model, [1, 99999])
    with pytest.raises(openai.BadRequestError, match=r"input\[1\] has token id 99999"):
        client.embeddings.create(model=model, input=[[1], [2, 99999]])
    r = post(server, "/detokenize", model=model, tokens=[1, 99999])
    assert r.status_code == 400
    assert "token id 99999" in r.json()["error"]["message"]


# -- fill-in-the-middle -----------------------------------------------------------------------
def test_the_fim_prompt_is_pre_prompt_suf_suffix_mid_on_both_backends(
    fim_models: tuple[Path, Path],
) -> None:
    hf, gguf = fim_models
    expected = fim_ids(hf)
    job = Job(1, {"id": "fim"}, "completion", BEFORE, suffix=AFTER)
    spec = ModelSpec("fim", str(hf), "transformers")
    transformers = TransformersBackend().load(spec, LoadProgress())
    assert isinstance(transformers, TransformersInstance)
    assert transformers.prompt_ids(job) == expected
    spec = ModelSpec("fim", str(gguf), "gguf", GGUF_OPTIONS)
    llamacpp = LlamaCppBackend().load(spec, LoadProgress())
    assert isinstance(llamacpp, LlamaCppBatchInstance)
    assert llamacpp.prompt_tokens(Sequence(job=job)) == expected
    # llama.cpp read them from the GGUF's metadata, which the FIM variant writes
    assert llamacpp.model.metadata()["tokenizer.ggml.fim_pre_token_id"] == str(expected[0])


@pytest.mark.parametrize("model", ["fim-hf", "fim-gguf"])
def test_a_suffix_completes_the_middle_from_the_fim_prompt(
    server: Server, client: openai.OpenAI, fim_models: tuple[Path, Path], model: str
) -> None:
    expected = fim_ids(fim_models[0])
    middle = complete(client, model, BEFORE, suffix=AFTER)
    assert middle.usage.prompt_tokens == len(expected)
    assert middle.choices[0].text == complete(client, model, expected).choices[0].text


@pytest.mark.parametrize("model", BOTH)
def test_a_model_without_fim_tokens_refuses_a_suffix_by_name(
    client: openai.OpenAI, model: str
) -> None:
    with pytest.raises(openai.BadRequestError, match=f"model {model} has no fill-in-the-middle"):
        complete(client, model, BEFORE, suffix=AFTER)


# -- /tokenize and /detokenize ----------------------------------------------------------------
@pytest.mark.parametrize("model", BOTH)
def test_tokenize_gives_the_ids_a_completion_reads_and_the_context(
    server: Server, tiny_models: tuple[Path, Path], model: str
) -> None:
    ids = _tokenizer(tiny_models[0])(PROMPT)["input_ids"]
    r = post(server, "/tokenize", model=model, prompt=PROMPT)
    assert r.json() == {"tokens": ids, "count": len(ids), "max_model_len": CONTEXT}


@pytest.mark.parametrize("model", BOTH)
def test_tokenize_applies_the_chat_template_with_or_without_the_assistants_turn(
    server: Server, client: openai.OpenAI, tiny_models: tuple[Path, Path], model: str
) -> None:
    tokenizer = _tokenizer(tiny_models[0])
    messages: Any = [{"role": "user", "content": "What is the capital of France?"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    opened = tokens(server, model, messages=messages)
    closed = tokens(server, model, messages=messages, add_generation_prompt=False)
    assert opened == tokenizer(text, add_special_tokens=False)["input_ids"]
    assert opened == [*closed, tokenizer.convert_tokens_to_ids("<|assistant|>")]
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=1)
    assert chat.usage is not None and chat.usage.prompt_tokens == len(opened)


@pytest.mark.parametrize("model", BOTH)
def test_detokenize_gives_back_the_text_special_tokens_included(server: Server, model: str) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"prompt": PROMPT}, PROMPT),
        ({"messages": [{"role": "user", "content": "hi"}]}, "<|user|>hi\n<|assistant|>"),
    ]
    for body, text in cases:
        r = post(server, "/detokenize", model=model, tokens=tokens(server, model, **body))
        assert r.json() == {"prompt": text}


@pytest.mark.parametrize("route", ["/tokenize", "/detokenize"])
def test_tokenize_and_detokenize_of_an_unknown_model_are_404(server: Server, route: str) -> None:
    r = post(server, route, model="nowhere", prompt="a", tokens=[1])
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "model_not_found"
