"""A model that ships no chat template (as base models ship), given one by its catalogue
entry's chat_template option, written out or in a file, on both real backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coderai.bus.messages import Job, ModelSpec
from coderai.engine.backends.base import LoadProgress
from tests.support.server import Server, serving
from tests.support.tinymodel import CONTEXT, build

KEY = "test-admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
GGUF_OPTIONS = {"n_ctx": CONTEXT, "kv_cache": "f32"}
#: two templates unlike the tiny model's own, each telling its prompts apart
INLINE = (
    "{% for m in messages %}<|{{ m['role'] }}|>Say: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
IN_FILE = INLINE.replace("Say: ", "Tell: ")
HI = [{"role": "user", "content": "hi"}]
#: a template that places an assistant turn's reasoning before its text, as Qwen3's does
#: for a tool loop's turns
PLACES_THINKING = (
    "{% for m in messages %}<|{{ m['role'] }}|>"
    "{% if m.get('reasoning_content') %}<think>{{ m['reasoning_content'] }}</think>{% endif %}"
    "{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
#: a template that knows tools and has the model write Mistral's calls
MISTRAL = "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}{% endif %}[TOOL_CALLS]"
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {}}}


@pytest.fixture(scope="module")
def bare_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny model without a chat template: a transformers folder and a GGUF."""
    return build(tmp_path_factory.mktemp("bare"), chat_template=False)


@pytest.fixture(scope="module")
def template_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("templates") / "chat.jinja"
    path.write_text(IN_FILE, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def server(
    bare_models: tuple[Path, Path], template_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    hf, gguf = bare_models
    models: list[dict[str, Any]] = []
    for backend, path, options in (("hf", hf, {}), ("gguf", gguf, GGUF_OPTIONS)):
        models += [
            {"id": f"bare-{backend}", "path": str(path), "options": options},
            {"id": f"inline-{backend}", "path": str(path),
             "options": {**options, "chat_template": INLINE}},
            {"id": f"file-{backend}", "path": str(path),
             "options": {**options, "chat_template": str(template_file)}},
            {"id": f"think-{backend}", "path": str(path),
             "options": {**options, "chat_template": PLACES_THINKING}},
            {"id": f"opens-{backend}", "path": str(path),
             "options": {**options, "chat_template": OPENS_THINK}},
            {"id": f"switch-{backend}", "path": str(path),
             "options": {**options, "chat_template": SWITCH}},
        ]  # fmt: skip
    env = {"CODERAI_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))}
    folder = tmp_path_factory.mktemp("chat-templates")
    with serving(folder, {"engines": 1}, models, 1, KEY, env=env) as srv:
        yield srv


def post(srv: Server, route: str, **body: Any) -> httpx.Response:
    return httpx.post(srv.url + route, json=body, timeout=120)


def chat(srv: Server, model: str) -> httpx.Response:
    return post(srv, "/v1/chat/completions", model=model, messages=HI, max_tokens=4,
                temperature=0)  # fmt: skip


def prompt_of(srv: Server, model: str) -> tuple[str, int]:
    """The chat prompt the model reads for HI, as text, and its length in tokens."""
    tokenized = post(srv, "/tokenize", model=model, messages=HI)
    assert tokenized.status_code == 200, tokenized.text
    ids = tokenized.json()["tokens"]
    text = post(srv, "/detokenize", model=model, tokens=ids)
    assert text.status_code == 200, text.text
    return text.json()["prompt"], len(ids)


@pytest.mark.parametrize("model", ["bare-hf", "bare-gguf"])
def test_a_model_without_a_chat_template_refuses_chat_and_still_completes(
    server: Server, model: str
) -> None:
    refused = chat(server, model)
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert "has no chat template" in message and "chat_template" in message
    completed = post(server, "/v1/completions", model=model, prompt="The quick", max_tokens=2)
    assert completed.status_code == 200, completed.text


@pytest.mark.parametrize(
    ("model", "written"),
    [("inline-hf", "Say"), ("inline-gguf", "Say"), ("file-hf", "Tell"), ("file-gguf", "Tell")],
)
def test_the_entrys_template_written_out_or_in_a_file_writes_the_chat_prompt(
    server: Server, model: str, written: str
) -> None:
    prompt, length = prompt_of(server, model)
    assert prompt == f"<|user|>{written}: hi\n<|assistant|>"
    answered = chat(server, model)
    assert answered.status_code == 200, answered.text
    assert answered.json()["usage"]["prompt_tokens"] == length


def test_an_admin_save_with_a_template_that_cannot_be_used_is_refused_naming_it(
    server: Server, tmp_path: Path
) -> None:
    before = httpx.get(server.url + "/admin/api/models", headers=AUTH, timeout=10).json()
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}")
    absent = tmp_path / "absent.jinja"
    for value, why in ((str(absent), "No such file"), (str(broken), "does not compile")):
        entry = {"id": "templated", "format": "fake", "options": {"chat_template": value}}
        for method, url, body in (
            ("POST", "/admin/api/models", entry),
            ("PUT", "/admin/api/models", {"models": [entry]}),
        ):
            r = httpx.request(method, server.url + url, json=body, headers=AUTH, timeout=10)
            assert r.status_code == 400, r.text
            message = r.json()["error"]["message"]
            assert "'templated'" in message and value in message and why in message
    after = httpx.get(server.url + "/admin/api/models", headers=AUTH, timeout=10).json()
    assert after == before, "a refused catalogue changes nothing"


def test_an_admin_edit_gives_a_model_a_template_and_its_chat_answers(
    server: Server, bare_models: tuple[Path, Path], template_file: Path
) -> None:
    added = {"id": "edited-gguf", "path": str(bare_models[1]), "options": GGUF_OPTIONS}
    r = httpx.post(server.url + "/admin/api/models", json=added, headers=AUTH, timeout=10)
    assert r.status_code == 200, r.text
    assert chat(server, "edited-gguf").status_code == 400
    options = {**GGUF_OPTIONS, "chat_template": str(template_file)}
    r = httpx.patch(server.url + "/admin/api/models/edited-gguf", json={"options": options},
                    headers=AUTH, timeout=10)  # fmt: skip
    assert r.status_code == 200, r.text
    (saved,) = [m for m in r.json()["models"] if m["id"] == "edited-gguf"]
    assert saved["options"]["chat_template"] == str(template_file), "the catalogue keeps the path"
    assert prompt_of(server, "edited-gguf")[0] == "<|user|>Tell: hi\n<|assistant|>"
    assert chat(server, "edited-gguf").status_code == 200


def test_a_startup_catalogue_with_a_missing_template_file_stops_the_server_naming_it(
    tmp_path: Path,
) -> None:
    absent = tmp_path / "absent.jinja"
    models = [{"id": "templated", "format": "fake", "options": {"chat_template": str(absent)}}]
    srv = Server(tmp_path / "server", {"engines": 1}, models)
    try:
        assert srv.proc.wait(30) == 2
        log = srv.log()
        assert "model 'templated': options.chat_template: cannot read" in log
        assert str(absent) in log
    finally:
        srv.stop()


def loaded(bare_models: tuple[Path, Path], backend: str, template: str) -> Any:
    """The bare tiny model on a backend, given a chat template by its entry."""
    from coderai.engine.backends.llamacpp.backend import LlamaCppBackend
    from coderai.engine.backends.transformers.backend import TransformersBackend

    hf, gguf = bare_models
    options = {"chat_template": template}
    if backend == "transformers":
        spec = ModelSpec("t", str(hf), "transformers", options)
        return TransformersBackend().load(spec, LoadProgress())
    spec = ModelSpec("t", str(gguf), "gguf", {**GGUF_OPTIONS, **options})
    return LlamaCppBackend().load(spec, LoadProgress())


@pytest.mark.parametrize("backend", ["transformers", "gguf"])
def test_the_backends_read_the_tool_call_format_from_the_entrys_template(
    bare_models: tuple[Path, Path], backend: str
) -> None:
    instance = loaded(bare_models, backend, MISTRAL)
    assert instance.tool_format == "mistral"
    job = Job(1, {}, "chat", messages=HI, tools=[WEATHER])
    ids, _context = instance.tokenize(job)
    assert instance.detokenize(ids).startswith("[AVAILABLE_TOOLS]")


#: a template with Qwen3's switch: thinking turned off writes an empty block in the prompt
SWITCH = INLINE.replace(
    "<|assistant|>{% endif %}",
    "<|assistant|>{% if enable_thinking is defined and not enable_thinking %}<think></think>"
    "{% endif %}{% endif %}",
)
#: a template that opens the answer's reasoning, as DeepSeek-R1's does
OPENS_THINK = INLINE.replace("<|assistant|>", "<|assistant|><think>\n")


@pytest.mark.parametrize("backend", ["transformers", "gguf"])
def test_the_backends_know_a_prompt_that_opens_reasoning(
    bare_models: tuple[Path, Path], backend: str
) -> None:
    """The template says the model reasons, and its prompt ends inside `<think>`: the
    backend says so as it renders the prompt, and what the model writes is reasoning
    until `</think>`. Without the template's think, a sequence splits nothing; under a
    JSON grammar from the first token (a response format) it splits nothing either; a
    required call's grammar lets it think first."""
    from coderai.engine.backends.base import Sequence
    from coderai.engine.decoding import structured

    for template, opened in ((OPENS_THINK, True), (INLINE, False)):
        instance = loaded(bare_models, backend, template)
        assert instance.reasoning_format == ("think" if opened else "none")
        seq = Sequence(Job(1, {}, "chat", messages=HI, max_tokens=8, temperature=0.0))
        instance.start(seq)
        structured.prepare(seq, instance)
        assert seq.opened is opened and (seq.reasoning is not None) is opened
        if opened:
            assert structured.split(seq, "some words", end=True).reasoning == "some words"
        instance.release(seq)
    instance = loaded(bare_models, backend, OPENS_THINK)
    # a required call, under the grammar of the model's own format, comes after thinking
    job = Job(2, {}, "chat", messages=HI, tools=[WEATHER], tool_choice="required")
    seq = Sequence(job)
    seq.instance = instance
    instance.start(seq)
    structured.prepare(seq, instance)
    assert seq.opened and seq.own_format and seq.constraint is not None
    assert seq.reasoning is not None and seq.reasoning.reasoning
    instance.release(seq)
    # a response format's JSON from the first token: no thinking under it
    seq = Sequence(Job(3, {}, "chat", messages=HI, response_format={"type": "json_object"}))
    instance.start(seq)
    structured.prepare(seq, instance)
    assert seq.opened and seq.constraint is not None and seq.reasoning is None
    instance.release(seq)


@pytest.mark.parametrize("model", ["think-hf", "think-gguf"])
@pytest.mark.parametrize("name", ["reasoning_content", "reasoning"])
def test_an_earlier_turns_reasoning_reaches_the_template(
    server: Server, model: str, name: str
) -> None:
    """Sent back on its assistant turn, under either name, a turn's thinking is placed by
    the template, so the next prompt holds what the model wrote (and can reuse it)."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello", name: "They greet me."},
        {"role": "user", "content": "bye"},
    ]
    tokenized = post(server, "/tokenize", model=model, messages=messages)
    assert tokenized.status_code == 200, tokenized.text
    text = post(server, "/detokenize", model=model, tokens=tokenized.json()["tokens"])
    assert "<|assistant|><think>They greet me.</think>hello" in text.json()["prompt"]


def _usage(response: httpx.Response) -> tuple[int, int, dict[str, Any]]:
    assert response.status_code == 200, response.text
    body = response.json()
    usage = body["usage"]
    spent = usage["completion_tokens_details"]["reasoning_tokens"]
    return spent, usage["completion_tokens"], body["choices"][0]["message"]


@pytest.mark.parametrize("backend", ["hf", "gguf"])
def test_a_thinking_budget_forces_the_end_of_thinking_on_a_real_model(
    server: Server, backend: str
) -> None:
    """The prompt opens `<think>` and the random tiny model never closes it: without a
    budget every token is thinking; with one, `</think>` is forced once it is spent (its
    tokens counted as thinking: they close it), and what follows is the answer."""
    model = f"opens-{backend}"
    marker = post(server, "/tokenize", model=model, prompt="</think>")
    assert marker.status_code == 200, marker.text
    plain = post(server, "/tokenize", model=model, prompt="")
    marker_tokens = len(marker.json()["tokens"]) - len(plain.json()["tokens"])  # less a BOS
    ask = {"model": model, "messages": HI, "max_tokens": 16, "temperature": 0}

    spent, total, message = _usage(post(server, "/v1/chat/completions", **ask))
    assert spent == total == 16 and not message["content"]

    budget = 5
    body = {**ask, "thinking_token_budget": budget}
    spent, total, message = _usage(post(server, "/v1/chat/completions", **body))
    assert spent == budget + marker_tokens and total == 16
    assert message["reasoning_content"]
    # nothing after the forced marker is taken for thinking
    assert message["content"] is None or "</think>" not in message["content"]

    # log-probabilities cover every completion token, the thinking's and the marker's too
    with_logprobs = post(server, "/v1/chat/completions", **body, logprobs=True)
    assert with_logprobs.status_code == 200, with_logprobs.text
    entries = with_logprobs.json()["choices"][0]["logprobs"]["content"]
    assert len(entries) == total
    assert "".join(e["token"] for e in entries[budget : budget + marker_tokens]) == "</think>"

    # a budget of nothing: the marker from the first token, no thinking text
    spent, _, message = _usage(
        post(server, "/v1/chat/completions", **{**ask, "thinking_token_budget": 0})
    )
    assert spent == marker_tokens and not message.get("reasoning_content")


@pytest.mark.parametrize("backend", ["hf", "gguf"])
def test_chat_template_kwargs_reach_the_template_and_win_over_the_effort(
    server: Server, backend: str
) -> None:
    """`chat_template_kwargs` are the template's variables (vLLM's name): Qwen3's switch
    turned off writes its empty thinking block into the prompt, whatever the effort
    says; one the template does not read changes nothing; the server's own are refused."""
    model = f"switch-{backend}"
    marker = post(server, "/tokenize", model=model, prompt="<think></think>")
    plain = post(server, "/tokenize", model=model, prompt="")
    block = len(marker.json()["tokens"]) - len(plain.json()["tokens"])
    ask = {"model": model, "messages": HI, "max_tokens": 1, "temperature": 0}

    def prompt_tokens(**extra: Any) -> int:
        response = post(server, "/v1/chat/completions", **ask, **extra)
        assert response.status_code == 200, response.text
        return int(response.json()["usage"]["prompt_tokens"])

    base = prompt_tokens()
    off = {"enable_thinking": False}
    assert prompt_tokens(chat_template_kwargs=off) == base + block
    assert prompt_tokens(reasoning_effort="none") == base + block
    assert (
        prompt_tokens(reasoning_effort="none", chat_template_kwargs={"enable_thinking": True})
        == base
    )
    assert prompt_tokens(chat_template_kwargs={"unread": [1, {"a": None}]}) == base
    # /tokenize counts what chat reads, the template's variables included
    counted = post(server, "/tokenize", model=model, messages=HI, chat_template_kwargs=off)
    assert counted.status_code == 200, counted.text
    assert counted.json()["count"] == base + block
    deep: Any = 0
    for _ in range(600):  # deeper than any template needs, and than recursion allows
        deep = [deep]
    bads: list[dict[str, Any]] = [
        {"messages": []},
        {"chat_template": "{{ 1 }}"},  # a renderer's own argument
        {"not an identifier": 1},
        {"n": 2**70},
        {"deep": deep},
    ]
    for bad in bads:
        refused = post(server, "/v1/chat/completions", **ask, chat_template_kwargs=bad)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == "chat_template_kwargs", refused.text
