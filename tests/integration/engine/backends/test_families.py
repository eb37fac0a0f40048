"""Each model family's chat template carried by a tiny model made here (in its GGUF's
metadata and its tokenizer's config, as a real model ships it): both backends read the
family's formats from the model itself and render a tool loop's conversation (tools, a
call, its result, earlier reasoning) in the family's own markup, through llama.cpp's and
transformers' template engines. The templates: tests/support/families.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coderai.bus.messages import Job, ModelSpec
from coderai.engine.backends.base import LoadProgress, Sequence
from coderai.tinymodel import CONTEXT, build
from tests.support.families import CONVERSATION, FAMILIES, WEATHER


@pytest.fixture(scope="module")
def family_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    return {
        name: build(tmp_path_factory.mktemp(name), chat_template=family.template)
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
    spec = ModelSpec("t", str(gguf), "gguf", {"n_ctx": CONTEXT, "kv_cache": "f32"})
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
