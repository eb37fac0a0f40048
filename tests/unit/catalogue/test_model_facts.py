"""A model's facts as /v1/models and `coderai models list` give them: from its file when
not loaded (a GGUF's header, the entry's options first), from its engine's report when
loaded; and the bus check of that report."""

from __future__ import annotations

from pathlib import Path

import pytest

from coderai.bus.checker import residents_of
from coderai.catalogue.defaults import embedded_gguf
from coderai.catalogue.entries import ModelEntry
from coderai.catalogue.model_facts import ModelFacts, from_file
from coderai.cli.models_list import rows
from coderai.errors import BusProtocolError
from coderai.front.api.openai.model_listing import model_object

SMOL = embedded_gguf()
TOOLS_TEMPLATE = (
    "{% for t in tools %}{{ t }}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}"
)


def test_a_gguf_tells_its_trained_window_and_its_template_what_it_can_do() -> None:
    assert SMOL is not None
    assert from_file(ModelEntry(id="s", path=str(SMOL)), "gguf") == ModelFacts(8192)
    own = ModelEntry(id="s", path=str(SMOL), options={
        "n_ctx": 2048, "chat_template": TOOLS_TEMPLATE, "reasoning_format": "think"})  # fmt: skip
    assert from_file(own, "gguf") == ModelFacts(2048, tools=True, reasoning=True)


def test_a_file_that_cannot_be_read_leaves_its_facts_unknown(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF\x03\0\0\0")
    assert from_file(ModelEntry(id="b", path=str(broken)), "gguf") == ModelFacts()
    fake = ModelEntry(id="f", format="fake", options={"context": 4096})
    assert from_file(fake, "fake") == ModelFacts(4096, tools=True)


def test_a_loaded_model_is_described_by_its_engine() -> None:
    report = {"model": "m", "mb": 10.0, "busy": False, "idle_for": 75.04, "context": 4096,
              "tools": True, "reasoning": True, "vision": False}  # fmt: skip
    listed = model_object("m", ModelFacts(8192), [("e0", report)])
    assert listed["context_length"] == listed["max_model_len"] == 4096  # what it created
    assert listed["loaded"] is True and listed["capabilities"] == ["tools", "reasoning"]
    assert listed["loaded_on"] == [{"engine": "e0", "busy": False, "idle_seconds": 75.0}]
    unloaded = model_object("m", ModelFacts(8192))
    assert unloaded["loaded"] is False and unloaded["context_length"] == 8192
    assert rows([listed, unloaded, {**unloaded, "loaded_on": None}])[1:] == [
        "m\t4,096\ttools,reasoning\te0 (idle 75 s)",
        "m\t8,192\t-\tno",
        "m\t8,192\t-\t(no server running)",
    ]


@pytest.mark.parametrize(
    "bad", [{"context": -1}, {"context": 1.5}, {"tools": "yes"}, {"vision": 1}]
)
def test_a_resident_report_with_malformed_facts_is_refused(bad: dict[str, object]) -> None:
    good = {"model": "m", "mb": 1.0, "busy": False, "idle_for": 0.0}
    assert residents_of([good, {**good, "context": 8, "tools": True}])
    with pytest.raises(BusProtocolError):
        residents_of([{**good, **bad}])


def test_a_vision_projector_counts_in_the_memory_estimate_and_the_facts(tmp_path: Path) -> None:
    from coderai.catalogue.entry_estimate import estimate

    assert SMOL is not None
    projector = tmp_path / "mmproj.gguf"
    projector.write_bytes(b"\0" * 3_000_000)
    plain = ModelEntry(id="s", path=str(SMOL), options={"n_ctx": 1024})
    seeing = ModelEntry(id="s", path=str(SMOL), options={"n_ctx": 1024, "mmproj": str(projector)})
    room = 1 << 34
    assert estimate(seeing, room, False, "RAM").weights == (
        estimate(plain, room, False, "RAM").weights + 3_000_000
    )
    assert from_file(seeing, "gguf").vision and not from_file(plain, "gguf").vision
