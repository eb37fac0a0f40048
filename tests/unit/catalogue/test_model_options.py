"""A catalogue entry's options: one no backend reads is refused, naming it, where the
catalogue is read and by the engine that would load it (an option accepted and ignored
would let a user believe it took effect)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from coderai.bus.messages import ModelSpec
from coderai.catalogue.entries import ModelEntry
from coderai.engine.backends.fake import FakeBackend
from coderai.engine.pool import ModelPool
from coderai.errors import JobError
from coderai.front.dispatch.probe import refusals


@pytest.mark.parametrize(
    ("fmt", "options", "says"),
    [(None, {"speculate": "ngram"}, "'speculate': not read by any backend"),
     ("gguf", {"dtype": "bf16"}, "'dtype': not read by the llama.cpp backend"),
     ("fake", {"n_ctx": 8192, "n_batch": 2}, "options 'n_batch', 'n_ctx': not read by the fake"),
     ("gguf", {"backend": "transformers", "n_ctx": 8}, "'n_ctx': not read by the transformers")],
)  # fmt: skip
def test_an_option_its_backend_does_not_read_is_refused_naming_it(
    fmt: str | None, options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        ModelEntry(id="m", path="m.gguf", format=fmt, options=options)


@pytest.mark.parametrize(
    ("fmt", "options"),
    [(None, {"n_ctx": 8192, "dtype": "bf16"}),  # the file says which backend reads them
     ("gguf", {"n_ctx": 8192, "kv_cache": "f32", "chat_template": "{{ messages }}"}),
     ("gguf", {"backend": "transformers", "dtype": "bf16"}),
     ("fake", {"output_tokens": 3, "memory_mb": 1, "tool_format": "hermes"})],
)  # fmt: skip
def test_the_options_a_backend_reads_are_taken(fmt: str | None, options: dict[str, Any]) -> None:
    assert ModelEntry(id="m", path="m.gguf", format=fmt, options=options).options == options


def test_the_engine_refuses_a_spec_with_an_option_its_backend_does_not_read() -> None:
    """A spec that came through no catalogue (a format read from the file, a node)."""
    pool = ModelPool({"fake": FakeBackend()}, on_loaded=lambda key: None)
    spec = ModelSpec("m", "", "fake", {"n_ctx": 8192})
    with pytest.raises(JobError, match="'n_ctx': not read by the fake backend") as refused:
        pool.backend_for(spec)
    assert refused.value.kind == "bad_model"


def test_a_format_read_from_the_file_has_its_options_checked_before_a_save() -> None:
    """An entry that leaves its format to the file: checked once the file is read."""
    entries = [ModelEntry(id="a", path="a.gguf", options={"dtype": "bf16"}),
               ModelEntry(id="b", path="b", options={"dtype": "bf16"})]  # fmt: skip
    refused = refusals({"a": "gguf", "b": "transformers"}, entries)
    assert refused == ["model 'a': unknown model option 'dtype': not read by the llama.cpp backend"]


def test_a_backend_other_than_transformers_is_refused() -> None:
    with pytest.raises(ValidationError, match="backend 'transformer'"):
        ModelEntry(id="m", path="m.gguf", options={"backend": "transformer"})
