"""What a model that reads no images gets in a medium's place, for each API's shape: a
placeholder naming the image, a PDF's text (or a placeholder for a scan), a text file as
itself; never a refusal, and the same text for the same bytes."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from coderai.front.api.anthropic.request import NOT_BUILT as MESSAGES_NOT_BUILT
from coderai.front.api.anthropic.request import MessagesRequest
from coderai.front.api.openai.schemas import MEDIA_HEADER, ChatRequest, parse
from coderai.front.api.responses.request import NOT_BUILT as RESPONSES_NOT_BUILT
from coderai.front.api.responses.request import ResponsesRequest
from coderai.front.api.translation import chat_request, validate
from coderai.front.media.medium import Medium
from coderai.front.media.shown import show
from tests.support.media import data_url, png, scanned_pdf, text_pdf

PNG = png(1280, 720)
PLACEHOLDER = "[image: image/png, 1280x720, not shown: this model reads no images]"


def _chat(content: list[dict[str, Any]], role: str = "user") -> ChatRequest:
    body = {"model": "m", "messages": [{"role": role, "content": content}]}
    req: ChatRequest = parse(ChatRequest, body)
    return req


def test_an_image_is_a_placeholder_with_its_type_and_size() -> None:
    image = {"type": "image_url", "image_url": {"url": data_url(PNG, "image/png")}}
    req = _chat([{"type": "text", "text": "What is on screen?"}, image])
    assert req.messages[0].text() == f"What is on screen?\n{PLACEHOLDER}\n"
    asyncio.run(req.read_media())
    assert req.notices == {MEDIA_HEADER: "image image/png 1280x720"}


def test_the_same_bytes_give_the_same_text_whatever_their_type_says() -> None:
    as_jpeg = show(Medium("image", url=data_url(PNG, "image/jpeg")))  # a misnamed type
    assert as_jpeg.text == PLACEHOLDER  # the bytes say what they are


def test_what_cannot_be_read_is_named_not_refused() -> None:
    assert (
        "its base64 does not decode" in show(Medium("image", url="data:image/png;base64,%%")).text
    )
    assert "not an image" in show(Medium("image", url=data_url(b"GIF89a no", "image/gif"))).text
    remote = show(Medium("image", url="https://example.org/shot.png")).text
    assert remote == "[image: https://example.org/shot.png, not shown: this model reads no images]"
    assert "keeps no uploaded files" in show(Medium("file", file_id="file-9")).text
    assert show(Medium("audio", data="AAAA", mime="wav")).text.startswith("[audio: wav, not heard")


def test_a_pdf_is_its_text_under_its_name_and_a_scan_a_placeholder() -> None:
    pdf = text_pdf(["The answer is 42.", "Second page."], title="Ignored title")
    shown = show(Medium("file", url=data_url(pdf, "application/pdf"), name="report.pdf"))
    assert shown.text == ("[document: report.pdf, 2 pages]\nThe answer is 42.\n\nSecond page.\n"
                          "[end of document]")  # fmt: skip
    untitled = show(Medium("file", data=base64.b64encode(text_pdf(["x"], "Q3")).decode()))
    assert untitled.text.startswith("[document: Q3, 1 page]")  # its own title, its type sniffed
    scan = show(Medium("file", url=data_url(scanned_pdf(3), "application/pdf"), name="scan.pdf"))
    assert scan.text.startswith("[document: scan.pdf, application/pdf, 3 pages, not shown: it")
    broken = show(Medium("file", url=data_url(b"%PDF-1.4 garbage", "application/pdf")))
    assert "not read: it cannot be read as a PDF" in broken.text


def test_a_text_file_is_its_text_and_another_file_is_named() -> None:
    notes = show(Medium("file", url=data_url(b"line one\nline two", "text/plain"), name="a.txt"))
    assert notes.text == "[document: a.txt]\nline one\nline two\n[end of document]"
    zipped = show(Medium("file", url=data_url(b"PK\x03\x04\0\0", "application/zip"), name="b"))
    assert zipped.text == ("[document: b, application/zip, not read: this server reads PDFs and"
                           " text files only]")  # fmt: skip


def _messages(body: dict[str, Any]) -> ChatRequest:
    req = validate(MessagesRequest, {"model": "m", "max_tokens": 9, **body}, MESSAGES_NOT_BUILT)
    return chat_request(req.chat_body(), [])


def test_claude_codes_read_of_a_png_reaches_the_model_as_a_placeholder() -> None:
    """Read on a PNG returns an image block inside tool_result; every later turn resends it."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(PNG).decode()}}  # fmt: skip
    chat = _messages({"messages": [
        {"role": "user", "content": "Read shot.png"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read",
                                           "input": {"file_path": "shot.png"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [image]},
                                     {"type": "text", "text": "And this one?"}, image]},
    ]})  # fmt: skip
    tool, user = chat.messages[2], chat.messages[3]
    assert tool.role == "tool" and tool.text() == PLACEHOLDER + "\n"
    assert user.text() == f"And this one?\n{PLACEHOLDER}\n"


def test_anthropic_documents_become_text() -> None:
    pdf = {"type": "base64", "media_type": "application/pdf",
           "data": base64.b64encode(text_pdf(["Clause 7 applies."])).decode()}  # fmt: skip
    chat = _messages({"messages": [{"role": "user", "content": [
        {"type": "document", "source": pdf, "title": "contract.pdf"},
        {"type": "document", "source": {"type": "text", "data": "plain words"}, "title": "n"},
        {"type": "search_result", "source": "https://x.org", "title": "X",
         "content": [{"type": "text", "text": "found"}]},
        {"type": "text", "text": "Summarise."}]}]})  # fmt: skip
    text = chat.messages[0].text()
    assert "[document: contract.pdf, 1 page]\nClause 7 applies.\n[end of document]" in text
    assert "[document: n]\nplain words\n[end of document]" in text
    assert "[search result: X (https://x.org)]\nfound" in text and text.endswith("Summarise.")


def test_responses_images_and_files_in_messages_and_tool_outputs() -> None:
    body = {"model": "m", "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "Look:"},
            {"type": "input_image", "image_url": data_url(PNG, "image/png")},
            {"type": "input_file", "filename": "r.pdf",
             "file_data": data_url(text_pdf(["PDF body"]), "application/pdf")}]},
        {"type": "function_call", "call_id": "c", "name": "view", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [
            {"type": "input_image", "image_url": data_url(PNG, "image/png")}]},
    ]}  # fmt: skip
    req = validate(ResponsesRequest, body, RESPONSES_NOT_BUILT)
    chat = chat_request(req.chat_body(), [])
    user = chat.messages[0].text()
    assert user.startswith(f"Look:\n{PLACEHOLDER}\n[document: r.pdf, 1 page]\nPDF body")
    assert chat.messages[-1].role == "tool" and chat.messages[-1].text() == PLACEHOLDER + "\n"


def test_an_image_by_url_is_not_fetched_unless_the_config_allows() -> None:
    from coderai.config import MediaConfig
    from coderai.front.api.openai.schemas import _by_url

    why = asyncio.run(_by_url("https://example.org/a.png", MediaConfig()))
    assert why == "images by URL are not fetched here (the config's media.fetch_urls is off)"
    refused = asyncio.run(_by_url("http://127.0.0.1:9/a.png", MediaConfig(fetch_urls=True)))
    assert isinstance(refused, str) and "is an address that is not public" in refused


def test_a_webp_image_reaches_a_vision_model_as_png() -> None:
    """llama.cpp's own decoder reads PNG, JPEG, GIF and BMP: another type goes as PNG."""
    import io

    from PIL import Image

    from coderai.front.media.shown import seen

    out = io.BytesIO()
    Image.new("RGB", (40, 30), (1, 2, 3)).save(out, "WEBP")
    image = seen(Medium("image", url=data_url(out.getvalue(), "image/webp")))
    assert image is not None and image.raw[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.what == "image image/webp 40x30 (shown)"


def test_the_image_marker_cannot_be_smuggled_in_by_nesting_it() -> None:
    from coderai.bus.kinds import IMAGE_MARKER
    from coderai.front.api.openai.schemas import unmarked

    half = len(IMAGE_MARKER) // 2
    nested = IMAGE_MARKER[:half] + IMAGE_MARKER + IMAGE_MARKER[half:]
    assert unmarked(f"a {nested} b") == "a  b"
