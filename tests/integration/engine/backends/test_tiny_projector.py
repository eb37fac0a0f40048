"""The tiny vision projector (tests/support/tinyprojector.py) is one llama.cpp's multimodal
library takes: loaded beside the tiny model, a prompt with an image is split into text,
the image's tokens and text, and all of it is read into a llama.cpp context. The ground
the vision path stands on, with nothing downloaded."""

from __future__ import annotations

import ctypes
from pathlib import Path

from tests.support.media import png
from tests.support.stepping import text_of
from tests.support.tinyprojector import IMAGE_TOKENS, build_projector


def test_mtmd_reads_a_prompt_with_an_image_through_the_tiny_projector(
    tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    import llama_cpp
    import llama_cpp.mtmd_cpp as mtmd

    _, gguf = tiny_models
    projector = build_projector(tmp_path / "mmproj.gguf", embedding=64)  # the tiny model's
    params = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), params)
    options = mtmd.mtmd_context_params_default()
    options.use_gpu, options.print_timings, options.n_threads = False, False, 1
    ctx = mtmd.mtmd_init_from_file(str(projector).encode(), model, options)
    assert ctx and mtmd.mtmd_support_vision(ctx)
    context_params = llama_cpp.llama_context_default_params()
    context_params.n_ctx = context_params.n_batch = 256
    lctx = llama_cpp.llama_init_from_model(model, context_params)
    chunks = mtmd.mtmd_input_chunks_init()
    bitmap = None
    try:
        image = png(64, 48)
        data = (ctypes.c_ubyte * len(image)).from_buffer_copy(image)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(ctx, data, len(image), False)
        assert bitmap and mtmd.mtmd_bitmap_get_nx(bitmap) == 64
        marker = mtmd.mtmd_default_marker().decode()
        prompt = f"<|user|>What is in {marker}?\n<|assistant|>".encode()
        text = mtmd.mtmd_input_text()
        text.text, text.text_len, text.add_special, text.parse_special = (
            prompt,
            len(prompt),
            True,
            True,
        )
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        assert mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1) == 0
        kinds = [
            (mtmd.mtmd_input_chunk_get_type(chunk), mtmd.mtmd_input_chunk_get_n_tokens(chunk))
            for chunk in (mtmd.mtmd_input_chunks_get(chunks, i)
                          for i in range(mtmd.mtmd_input_chunks_size(chunks)))
        ]  # fmt: skip
        assert [k for k, _ in kinds] == [mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT,
                                         mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE,
                                         mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT]  # fmt: skip
        assert kinds[1][1] == IMAGE_TOKENS
        read = llama_cpp.llama_pos(0)
        assert mtmd.mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, 256, True,
                                            ctypes.byref(read)) == 0  # fmt: skip
        assert read.value == sum(n for _, n in kinds)
    finally:
        if bitmap:
            mtmd.mtmd_bitmap_free(bitmap)
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_free(ctx)
        llama_cpp.llama_free(lctx)
        llama_cpp.llama_model_free(model)


def test_a_model_with_a_projector_reads_images_in_its_batched_context(
    tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    """The llama.cpp engine with the tiny projector (`mmproj`): an image is read into its
    sequence's cells where its marker stands, counts its tokens in the prompt, and the same
    conversation again starts from the cached prefix, image and all."""
    from coderai.bus.kinds import IMAGE_MARKER
    from coderai.bus.messages import Job, ModelSpec
    from coderai.engine.backends.base import LoadProgress, Sequence
    from coderai.engine.backends.llamacpp.backend import LlamaCppBackend

    _, gguf = tiny_models
    projector = build_projector(tmp_path / "mmproj.gguf", embedding=64)
    spec = ModelSpec("v", str(gguf), "gguf", options={"mmproj": str(projector), "n_ctx": 512})
    instance = LlamaCppBackend().load(spec, LoadProgress())
    assert instance.facts()["vision"] is True
    # the window a sequence may fill (what /v1/models reports), not the sliding window
    assert instance.facts()["context"] == 512

    def job(images: list[bytes]) -> Job:
        content = f"What is this? {IMAGE_MARKER * len(images)}"
        return Job(1, {}, "chat", messages=[{"role": "user", "content": content}],
                   images=images, temperature=0, max_tokens=6)  # fmt: skip

    plain = Sequence(job=job([]))
    instance.start(plain)
    text_of(instance, plain, 20)
    seen = Sequence(job=job([png(64, 48)]))
    instance.start(seen)
    assert seen.prompt_tokens == plain.prompt_tokens + IMAGE_TOKENS
    first = text_of(instance, seen, 40)
    again = Sequence(job=job([png(64, 48)]))
    instance.start(again)
    assert again.prompt_tokens == seen.prompt_tokens
    assert text_of(instance, again, 40) == first  # the same image, the same answer
    assert again.cached_tokens > plain.prompt_tokens  # read from the cache past the image
    other = Sequence(job=job([png(32, 32)]))  # another image: no cache past the text before
    instance.start(other)
    text_of(instance, other, 40)
    assert other.cached_tokens < plain.prompt_tokens
    instance.unloaded()


def test_images_outside_chat_messages_are_refused(
    tiny_models: tuple[Path, Path], tmp_path: Path
) -> None:
    """A completion's raw prompt has no place for images: they are refused, not dropped."""
    import pytest

    from coderai.bus.kinds import IMAGE_MARKER
    from coderai.bus.messages import Job, ModelSpec
    from coderai.engine.backends.base import LoadProgress, Sequence
    from coderai.engine.backends.llamacpp.backend import LlamaCppBackend
    from coderai.errors import JobError

    _, gguf = tiny_models
    projector = build_projector(tmp_path / "mmproj.gguf", embedding=64)
    spec = ModelSpec("v", str(gguf), "gguf", options={"mmproj": str(projector), "n_ctx": 512})
    instance = LlamaCppBackend().load(spec, LoadProgress())
    job = Job(1, {}, "completion", prompt=IMAGE_MARKER, images=[png(64, 48)])
    with pytest.raises(JobError, match="images go with chat messages"):
        instance.start(Sequence(job=job))
    instance.unloaded()
