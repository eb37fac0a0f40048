"""A catalogue entry's chat_template option: a template written out or a file's path, read
and checked to compile where the catalogue is loaded or saved, and sent to engines as text."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from coderai.catalogue.entries import Catalogue, ModelEntry, catalogue_from
from coderai.catalogue.templatefile import MAX_BYTES, template_text
from coderai.engine.decoding.chat_template import chosen_template, tool_format
from coderai.errors import ConfigError, JobError
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.probe import with_templates
from coderai.front.engines.plan import EnginePlan

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
#: a template that knows tools and writes Mistral's calls
MISTRAL = "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}{% endif %}[TOOL_CALLS]"


def entry(options: dict[str, object], model_id: str = "m") -> ModelEntry:
    return ModelEntry(id=model_id, path="/models/m.gguf", options=options)


def templates_of(entries: list[ModelEntry]) -> dict[str, str]:
    return asyncio.run(with_templates(Catalogue(entries))).templates


# -- one value ---------------------------------------------------------------------------------
def test_a_template_written_out_is_taken_as_it_is() -> None:
    assert template_text(TEMPLATE) == TEMPLATE


def test_a_value_without_jinja_is_the_path_of_a_file_whose_text_is_the_template(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chat.jinja"
    path.write_text(TEMPLATE, encoding="utf-8")
    assert template_text(str(path)) == TEMPLATE


def test_a_relative_path_is_read_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "chat.jinja").write_text(TEMPLATE)
    monkeypatch.chdir(tmp_path)
    assert template_text("chat.jinja") == TEMPLATE


def test_a_missing_file_is_named_with_the_reason(tmp_path: Path) -> None:
    absent = tmp_path / "absent.jinja"
    with pytest.raises(ConfigError, match=rf"cannot read chat template file {absent}: No such"):
        template_text(str(absent))


def test_a_fifo_or_a_folder_is_refused_without_being_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "piped.jinja"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer
    for path in (fifo, tmp_path):
        with pytest.raises(ConfigError, match="is not a regular file"):
            template_text(str(path))


def test_a_file_that_is_not_utf8_or_too_large_is_refused(tmp_path: Path) -> None:
    latin = tmp_path / "latin.jinja"
    latin.write_bytes("{{ 'é' }}".encode("latin-1"))
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        template_text(str(latin))
    large = tmp_path / "large.jinja"
    large.write_bytes(b" " * (MAX_BYTES + 1))
    with pytest.raises(ConfigError, match="is larger than"):
        template_text(str(large))


def test_a_template_that_does_not_compile_is_refused_with_the_line(tmp_path: Path) -> None:
    broken = "{% for m in messages %}\n{{ m['content'] }"
    with pytest.raises(ConfigError, match=r"the template does not compile: .*\(line 2\)"):
        template_text(broken)
    path = tmp_path / "broken.jinja"
    path.write_text(broken)
    with pytest.raises(ConfigError, match=rf"chat template file {path} does not compile"):
        template_text(str(path))


def test_templates_compile_as_the_backends_compile_them() -> None:
    """Loop controls and Hugging Face's generation tag are what transformers and
    llama-cpp-python accept; an unknown filter is what neither does."""
    accepted = (
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% generation %}{{ m['content'] | tojson }}{% endgeneration %}{% endfor %}"
    )
    assert template_text(accepted) == accepted
    with pytest.raises(ConfigError, match="No filter named 'shout'"):
        template_text("{{ messages | shout }}")


# -- the catalogue -----------------------------------------------------------------------------
@pytest.mark.parametrize("value", [3, "", "  ", None, ["a"]])
def test_an_option_that_is_not_text_is_refused_as_the_catalogue_is_read(value: object) -> None:
    data = [{"id": "m", "path": "/models/m.gguf", "options": {"chat_template": value}}]
    with pytest.raises(ConfigError, match="options: chat_template must be a Jinja template"):
        catalogue_from(data, "models.json")


def test_a_catalogue_gets_each_entrys_template_text(tmp_path: Path) -> None:
    path = tmp_path / "chat.jinja"
    path.write_text(MISTRAL)
    entries = [
        entry({"chat_template": str(path)}, "from-file"),
        entry({"chat_template": TEMPLATE}, "inline"),
        entry({}, "own"),
    ]
    assert templates_of(entries) == {"from-file": MISTRAL, "inline": TEMPLATE}


def test_a_template_that_cannot_be_used_refuses_the_catalogue_naming_its_model(
    tmp_path: Path,
) -> None:
    absent = tmp_path / "absent.jinja"
    entries = [entry({"chat_template": TEMPLATE}, "fine"), entry({"chat_template": str(absent)})]
    with pytest.raises(ConfigError) as caught:
        templates_of(entries)
    assert caught.value.message.startswith("model 'm': options.chat_template: cannot read")
    assert str(absent) in caught.value.message


def test_a_template_read_past_the_deadline_refuses_the_catalogue_naming_its_model() -> None:
    release = threading.Event()

    def read(value: str) -> str:
        release.wait()
        return TEMPLATE

    catalogue = Catalogue([entry({"chat_template": "/hung/mount/chat.jinja"})])
    try:
        with pytest.raises(ConfigError, match=r"model 'm'.*/hung/mount/chat.jinja took more"):
            asyncio.run(with_templates(catalogue, timeout=0.05, read=read))
    finally:
        release.set()


def test_an_engine_is_sent_the_templates_text_and_the_catalogue_keeps_the_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chat.jinja"
    path.write_text(TEMPLATE)
    entries = [entry({"chat_template": str(path), "n_ctx": 64}), entry({}, "own")]
    catalogue = asyncio.run(with_templates(Catalogue(entries)))
    plans = [EnginePlan("cpu0", "cpu", ("gguf",), 2)]
    directory = ModelDirectory(catalogue, {"m": "gguf", "own": "gguf"}, plans)
    spec = directory.spec_of(directory.entry("m"))
    assert spec["options"] == {"chat_template": TEMPLATE, "n_ctx": 64}
    assert directory.spec_of(directory.entry("own"))["options"] == {}
    described = {m["id"]: m for m in directory.describe()}
    assert described["m"]["options"] == {"chat_template": str(path), "n_ctx": 64}


# -- the engine --------------------------------------------------------------------------------
def test_the_entrys_template_stands_in_for_the_models_own() -> None:
    assert chosen_template({}, "own") == "own"
    assert chosen_template({}, None) is None
    assert chosen_template({"chat_template": TEMPLATE}, "own") == TEMPLATE
    assert chosen_template({"chat_template": TEMPLATE}, None) == TEMPLATE


@pytest.mark.parametrize("value", ["/models/chat.jinja", 3, "{{ broken"])
def test_an_engine_refuses_a_template_option_it_cannot_use(value: object) -> None:
    """A path (a spec the front did not make), or a template that does not compile."""
    with pytest.raises(JobError) as caught:
        chosen_template({"chat_template": value}, "own")
    assert caught.value.kind == "bad_model"


def test_the_tool_call_format_is_read_from_the_entrys_template() -> None:
    options = {"chat_template": MISTRAL}
    assert tool_format(chosen_template(options, None), options) == "mistral"
    assert tool_format(chosen_template({}, None), {}) == "hermes"
