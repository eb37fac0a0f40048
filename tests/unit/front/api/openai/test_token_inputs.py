"""Token-id prompts and inputs, fill-in-the-middle and tokenize bodies: the pure parts
(request schemas, the backends' shared helpers, the fake model)."""

from __future__ import annotations

from typing import Any

import pytest

from coderai.bus.messages import Job, ModelSpec
from coderai.engine.backends.base import (
    LoadProgress,
    check_input_lengths,
    fill_in_the_middle,
    input_ids,
    known_ids,
)
from coderai.engine.backends.fake import FIM_PROMPT, FakeBackend, FakeInstance, job_prompt
from coderai.engine.backends.transformers.backend import fim_tokens
from coderai.errors import InvalidRequest, JobError
from coderai.front.api.openai.schemas import (
    ChatRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingRequest,
    TokenizeRequest,
    parse,
)

MODEL = {"id": "coder", "format": "fake", "options": {}}


def _completion(**body: Any) -> CompletionRequest:
    request: CompletionRequest = parse(CompletionRequest, {"model": "m", **body})
    return request


def _refused(model: Any, body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse(model, {"model": "m", **body})
    return caught.value


# -- /v1/completions --------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", [[5, 0, 7], [[5, 0, 7]]])
def test_a_prompt_of_token_ids_alone_or_in_a_list_of_one_is_token_ids(prompt: Any) -> None:
    assert _completion(prompt=prompt).prompts() == [[5, 0, 7]]


@pytest.mark.parametrize("prompt", ["text", ["text"]])
def test_a_text_prompt_alone_or_in_a_list_of_one_is_text(prompt: Any) -> None:
    assert _completion(prompt=prompt).prompts() == ["text"]


def test_several_prompts_are_several_and_too_many_choices_are_refused() -> None:
    assert _completion(prompt=["a", "b"]).prompts() == ["a", "b"]
    assert _completion(prompt=[[1], [2, 3]]).prompts() == [[1], [2, 3]]
    assert _refused(CompletionRequest, {"prompt": ["a"] * 9, "n": 8}).param == "prompt"


@pytest.mark.parametrize(
    ("prompt", "said"),
    [([], "empty list"), ([[]], "empty list of token ids"), ([1, -1], "-1"),
     ([1, 2**31], str(2**31)), ([True], "prompt"), ([1.0], "prompt"), ([1, "a"], "prompt")],
)  # fmt: skip
def test_a_prompt_that_is_no_token_ids_is_refused(prompt: Any, said: str) -> None:
    error = _refused(CompletionRequest, {"prompt": prompt})
    assert error.param == "prompt"
    assert said in error.message


def test_suffix_is_taken_on_completions_and_still_refused_on_chat() -> None:
    assert _completion(prompt="def f(", suffix="    return x").suffix == "    return x"
    chat = {"messages": [{"role": "user", "content": "hi"}], "suffix": "x"}
    assert _refused(ChatRequest, chat).param == "suffix"


@pytest.mark.parametrize(
    ("body", "param"),
    [({"prompt": [1, 2], "suffix": "x"}, "suffix"), ({"prompt": [1, 2], "echo": True}, "echo"),
     ({"prompt": "a", "suffix": "x", "echo": True}, "echo")],
)  # fmt: skip
def test_suffix_and_echo_need_a_text_prompt_and_exclude_each_other(
    body: dict[str, Any], param: str
) -> None:
    assert _refused(CompletionRequest, body).param == param


def test_an_empty_suffix_asks_nothing() -> None:
    assert _completion(prompt=[1, 2], suffix="").prompts() == [[1, 2]]


# -- /v1/embeddings ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "texts", "ids"),
    [("a", ["a"], []), (["a", "b"], ["a", "b"], []), ([3, 4], [], [[3, 4]]),
     ([[3, 4], [5]], [], [[3, 4], [5]])],
)  # fmt: skip
def test_embedding_inputs_are_texts_or_token_id_lists(
    given: Any, texts: list[str], ids: list[list[int]]
) -> None:
    request: EmbeddingRequest = parse(EmbeddingRequest, {"model": "m", "input": given})
    assert (request.texts(), request.token_ids()) == (texts, ids)


@pytest.mark.parametrize(
    ("given", "said"),
    [([[3], []], "input[1] is an empty list"), ([], "must not be empty"), ([[3, -2]], "-2"),
     (["a", 1], "input")],
)  # fmt: skip
def test_embedding_inputs_that_are_no_token_ids_are_refused(given: Any, said: str) -> None:
    error = _refused(EmbeddingRequest, {"input": given})
    assert error.param == "input"
    assert said in error.message


# -- /tokenize and /detokenize ----------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [{}, {"prompt": "a", "messages": [{"role": "user", "content": "a"}]}],
)
def test_tokenize_takes_either_a_prompt_or_messages(body: dict[str, Any]) -> None:
    assert "either prompt or messages" in _refused(TokenizeRequest, body).message


def test_tokenize_counts_an_image_as_the_text_in_its_place_and_refuses_tools() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    messages = [{"role": "user", "content": [image]}]
    request: TokenizeRequest = parse(TokenizeRequest, {"model": "m", "messages": messages})
    assert (request.messages or [])[0].text().startswith("[image: ")
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert _refused(TokenizeRequest, {"prompt": "a", "tools": tools}).param == "tools"


def test_detokenize_takes_token_ids_only() -> None:
    request: DetokenizeRequest = parse(DetokenizeRequest, {"model": "m", "tokens": [0, 9]})
    assert request.tokens == [0, 9]
    assert _refused(DetokenizeRequest, {"tokens": ["9"]}).param == "tokens"


# -- the backends' shared helpers -------------------------------------------------------------
@pytest.mark.parametrize("ids", [[0, 10], [-1], [True]])
def test_a_token_id_outside_the_vocabulary_is_a_bad_request_naming_it(ids: list[int]) -> None:
    with pytest.raises(JobError) as caught:
        known_ids(ids, 10, "prompt")
    assert caught.value.kind == "bad_request"
    assert f"prompt has token id {ids[-1]!r}" in caught.value.message


def test_the_fim_prompt_is_prefix_suffix_middle() -> None:
    job = Job(1, MODEL, "completion", "ab", suffix="c")
    encode = lambda text: [ord(c) for c in text]  # noqa: E731
    assert fill_in_the_middle(job, (1, 2, 3), encode, []) == [1, 97, 98, 2, 99, 3]
    assert fill_in_the_middle(job, (1, 2, 3), encode, [0]) == [0, 1, 97, 98, 2, 99, 3]


def test_a_model_without_fim_tokens_refuses_a_suffix_by_name() -> None:
    job = Job(1, MODEL, "completion", "ab", suffix="c")
    with pytest.raises(JobError) as caught:
        fill_in_the_middle(job, None, lambda text: [len(text)], [])
    assert caught.value.kind == "bad_request"
    assert "model coder has no fill-in-the-middle tokens" in caught.value.message


def test_embedding_inputs_become_token_ids_checked_or_encoded() -> None:
    encode = lambda text: [len(text)]  # noqa: E731
    assert input_ids([[1, 2], [3]], 4, encode) == [[1, 2], [3]]
    assert input_ids(["ab"], 4, encode) == [[2]]
    with pytest.raises(JobError, match=r"input\[1\] has token id 4"):
        input_ids([[1], [4]], 4, encode)


def test_an_embedding_input_of_no_tokens_is_refused() -> None:
    with pytest.raises(JobError, match=r"input\[1\] has no tokens"):
        check_input_lengths([2, 0], 10)


@pytest.mark.parametrize(
    "spelling",
    [("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
     ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"), ("▁<PRE>", "▁<SUF>", "▁<MID>")],
)  # fmt: skip
def test_a_tokenizers_fim_tokens_are_found_by_their_usual_spellings(
    spelling: tuple[str, str, str],
) -> None:
    vocabulary = {"a": 0, spelling[0]: 7, spelling[1]: 8, spelling[2]: 9}
    assert fim_tokens(vocabulary) == (7, 8, 9)
    assert fim_tokens({"a": 0, spelling[0]: 7}) is None


# -- the fake model ---------------------------------------------------------------------------
def _fake() -> FakeInstance:
    instance = FakeBackend().load(ModelSpec("f", "", "fake", {"context": 99}), LoadProgress())
    assert isinstance(instance, FakeInstance)
    return instance


def test_the_fake_model_tokenizes_to_utf8_bytes_and_back() -> None:
    fake = _fake()
    ids, context = fake.tokenize(Job(1, MODEL, "tokenize", "hé"))
    assert (ids, context) == ([104, 195, 169], 99)
    assert fake.detokenize(ids) == "hé"
    with pytest.raises(JobError, match="tokens has token id 256"):
        fake.detokenize([256])


def test_the_fake_model_tokenizes_messages_with_or_without_the_assistants_turn() -> None:
    messages = [{"role": "user", "content": "hi"}]
    opened, _ = _fake().tokenize(Job(1, MODEL, "tokenize", messages=messages))
    closed, _ = _fake().tokenize(
        Job(1, MODEL, "tokenize", messages=messages, add_generation_prompt=False)
    )
    assert bytes(opened).decode() == "<user>hi\n<assistant>"
    assert bytes(closed).decode() == "<user>hi\n"


def test_the_fake_models_token_id_prompt_reads_as_the_text_of_its_bytes() -> None:
    assert job_prompt(Job(1, MODEL, "completion", prompt_ids=[104, 105])) == "hi"


def test_the_fake_models_fim_prompt_holds_prompt_and_suffix() -> None:
    job = Job(1, MODEL, "completion", "def f(", suffix="  return x")
    assert job_prompt(job) == FIM_PROMPT.format(prompt="def f(", suffix="  return x")


def test_logprobs_with_echo_is_refused_as_the_prompt_is_not_scored() -> None:
    assert (
        _refused(CompletionRequest, {"prompt": "a", "echo": True, "logprobs": 0}).param
        == "logprobs"
    )
