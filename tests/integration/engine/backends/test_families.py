"""Each model family's chat template carried by a tiny model made here (in its GGUF's
metadata and its tokenizer's config, as a real model ships it): both backends read the
family's formats from the model itself and render a tool loop's conversation (tools, a
call, its result, earlier reasoning) in the family's own markup, through llama.cpp's and
transformers' template engines. The templates: tests/support/families.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coderai.bus.messages import Job, ModelSpec
from coderai.engine.backends.base import LoadProgress, Sequence
from coderai.engine.decoding import structured
from coderai.engine.decoding.harmony import HarmonyReader
from coderai.engine.decoding.tool_parse import ToolCallParser
from tests.support.families import CONVERSATION, FAMILIES, WEATHER
from tests.support.server import Server, running
from tests.support.stepping import call_deltas
from tests.support.tinymodel import build
from tests.support.tools import SHORT

#: the families' markup in the tiny vocabulary's tokens (about one a character) needs room
WINDOW = 1536


@pytest.fixture(scope="module")
def family_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    return {
        name: build(tmp_path_factory.mktemp(name), chat_template=family.template, context=WINDOW)
        for name, family in FAMILIES.items()
    }


def load(paths: tuple[Path, Path], backend: str) -> Any:
    from coderai.engine.backends.llamacpp.backend import LlamaCppBackend
    from coderai.engine.backends.transformers.backend import TransformersBackend

    hf, gguf = paths
    if backend == "transformers":
        return TransformersBackend().load(
            ModelSpec("t", str(hf), "transformers", {}), LoadProgress()
        )
    spec = ModelSpec("t", str(gguf), "gguf", {"n_ctx": WINDOW, "kv_cache": "f32"})
    return LlamaCppBackend().load(spec, LoadProgress())


@pytest.mark.parametrize("backend", ["gguf", "transformers"])
@pytest.mark.parametrize("name", FAMILIES)
def test_a_model_of_each_family_is_read_and_prompted_in_its_own_format(
    family_models: dict[str, tuple[Path, Path]], name: str, backend: str
) -> None:
    family = FAMILIES[name]
    instance = load(family_models[name], backend)
    assert (instance.tool_format, instance.reasoning_format) == (
        family.tool_format,
        family.reasoning_format,
    )
    job = Job(1, {}, "chat", messages=CONVERSATION, tools=[WEATHER], tool_choice="auto")
    ids, _context = instance.tokenize(job)
    prompt = instance.detokenize(ids)
    at = 0
    for fragment in family.rendered:
        found = prompt.find(fragment, at)
        assert found >= 0, f"{fragment!r} not after {at} in {prompt!r}"
        at = found + len(fragment)
    seq = Sequence(Job(2, {}, "chat", messages=CONVERSATION, tools=[WEATHER],
                       tool_choice="auto", max_tokens=1))  # fmt: skip
    instance.start(seq)
    try:
        assert seq.opened is family.opens  # the output starts inside its reasoning
    finally:
        instance.release(seq)
    # a required call is constrained in the family's own format, read by its own reader
    seq = Sequence(Job(3, {}, "chat", messages=CONVERSATION, tools=[WEATHER],
                       tool_choice="required", max_tokens=1))  # fmt: skip
    seq.instance = instance
    instance.start(seq)
    try:
        structured.prepare(seq, instance)
        assert seq.own_format and seq.constraint is not None
        reader = seq.parser
        if family.tool_format == "harmony":
            assert isinstance(reader, HarmonyReader)
        else:
            assert isinstance(reader, ToolCallParser) and reader.format == family.tool_format
            assert reader.mode == "auto"
        assert (seq.reasoning is not None) is (family.reasoning_format == "think")
    finally:
        instance.release(seq)


# -- a required or named call, in each family's own format -------------------------------------
OTHER = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"enum": ["UTC", "CET"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def server(
    family_models: dict[str, tuple[Path, Path]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    models = [
        {"id": f"{name}-{backend}", "path": str(hf if backend == "hf" else gguf),
         "options": {} if backend == "hf" else {"n_ctx": WINDOW, "kv_cache": "f32"}}
        for name, (hf, gguf) in family_models.items() for backend in ("gguf", "hf")
    ]  # fmt: skip
    cache = tmp_path_factory.mktemp("cache")
    with running(tmp_path_factory.mktemp("families"), models, cache) as srv:
        yield srv


@pytest.mark.parametrize("backend", ["gguf", "hf"])
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("choice", ["required", "named"])
def test_a_forced_call_is_written_in_the_familys_own_format(
    server: Server, name: str, backend: str, choice: str
) -> None:
    """Under the grammar of its own format (its reasoning, if any, cut short by a budget
    so that the random model gets to the call), the tiny model's call is read by that
    format's parser, which reads no other: a valid call of the tool asked for."""
    tool_choice: Any = "required"
    if choice == "named":
        tool_choice = {"type": "function", "function": {"name": "get_weather"}}
    body = {
        "model": f"{name}-{backend}",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [SHORT, OTHER] if choice == "named" else [SHORT],
        "tool_choice": tool_choice,
        "parallel_tool_calls": False,
        "thinking_token_budget": 2,
        "max_tokens": 400,
        "temperature": 0,
    }
    response = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    choice_out = response.json()["choices"][0]
    assert choice_out["finish_reason"] == "tool_calls", json.dumps(choice_out)
    calls = choice_out["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    arguments = json.loads(calls[0]["function"]["arguments"])
    assert arguments["city"] in ("Paris", "Rome") and 1 <= arguments["days"] <= 9


#: each XML or marked family's first words of a call, as if the model had written them
BEGUN = {
    "qwen3_coder": "Sure.<tool_call>\n<function=get_weather>\n<parameter=city>\n",
    "glm45": "Sure.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>",
    "kimi_k2": "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    "<|tool_call_argument_begin|>",
}


@pytest.mark.parametrize("backend", ["gguf", "transformers"])
@pytest.mark.parametrize("name", BEGUN)
def test_a_call_begun_in_an_xml_or_marked_format_is_finished_under_its_grammar(
    family_models: dict[str, tuple[Path, Path]], name: str, backend: str
) -> None:
    """tool_choice auto: once a call begins in the family's own markup, the rest of it is
    constrained in that markup, so even the random model completes a valid call."""
    instance = load(family_models[name], backend)
    job = Job(1, {}, "chat", messages=[{"role": "user", "content": "hi"}], tools=[SHORT],
              tool_choice="auto", parallel_tool_calls=False, temperature=0,
              max_tokens=300)  # fmt: skip
    seq = Sequence(job=job)
    seq.instance = instance
    instance.start(seq)
    structured.prepare(seq, instance)
    began = structured.read(seq, BEGUN[name])
    assert began.content == "Sure." and seq.lazy, "the rest of the call is constrained"
    deltas = [*began.calls, *call_deltas(instance, seq, 300)]
    calls: dict[int, list[str]] = {}
    for delta in deltas:  # a section may hold more calls: each must be valid
        calls.setdefault(delta.index, ["", ""])
        calls[delta.index][0] += delta.name
        calls[delta.index][1] += delta.arguments
    assert calls and all(name == "get_weather" for name, _ in calls.values()), calls
    for _, text in calls.values():
        arguments = json.loads(text)
        assert arguments["city"] in ("Paris", "Rome") and 1 <= arguments["days"] <= 9
    # the grammar ends with the call, or the answer with its one call (its closing tags
    # are not read: the scheduler ends the answer there)
    assert seq.constraint is None or seq.parser.done
