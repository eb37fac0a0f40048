"""A model's vision projector (`mmproj`, as llama.cpp's `--mmproj` takes it), read through
llama.cpp's multimodal library (mtmd) beside the model: a chat prompt whose text holds
bus.kinds.IMAGE_MARKER where each of the job's images goes is split into its text's
tokens and each image's tokens, and an image is read into a sequence's cells at its place
when the prompt reaches it (batch.py plans its read as a step of its own).

In a sequence's token list an image stands as placeholder ids (negative, so never a real
token) made from its bytes' hash and their place in it: the prefix cache, which keys a
prompt by its tokens, so keys an image by its content, and a conversation resent with its
screenshot is still a cache hit where the image is the same."""

from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass, field
from typing import Any

from coderai.bus.kinds import IMAGE_MARKER
from coderai.errors import JobError


def placeholder_ids(image: bytes, count: int) -> list[int]:
    """The ids an image's `count` tokens stand as: negative, its hash's, one per place
    (31 bits of the hash in each: two images whose first ids meet are the same image)."""
    base = int.from_bytes(hashlib.sha256(image).digest()[:8], "big")
    return [-1 - ((base + i) % 0x7FFFFFFF) for i in range(count)]


@dataclass
class Images:
    """A prompt's images once tokenized: each one's chunk by the position it starts at,
    and its token count (the chunks are freed with `free`)."""

    chunks: Any = None
    at: dict[int, tuple[Any, int]] = field(default_factory=dict)

    def length_at(self, position: int) -> int:
        """The tokens of the image that starts at `position` (0: none does)."""
        found = self.at.get(position)
        return found[1] if found else 0

    def next_after(self, position: int) -> int | None:
        """Where the first image at or after `position` starts (None: no more)."""
        later = [p for p in self.at if p >= position]
        return min(later) if later else None


class Projector:
    def __init__(self, path: str, model: Any, threads: int, use_gpu: bool) -> None:
        import llama_cpp.mtmd_cpp as mtmd

        self._mtmd: Any = mtmd
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.print_timings = False
        params.n_threads = threads
        self._marker = IMAGE_MARKER.encode()
        params.media_marker = self._marker  # kept referenced: the library copies it at init
        self.ctx = mtmd.mtmd_init_from_file(path.encode(), model, params)
        if not self.ctx:
            raise JobError(f"llama.cpp cannot load the vision projector {path}", kind="model_file")
        if not mtmd.mtmd_support_vision(self.ctx):
            mtmd.mtmd_free(self.ctx)
            raise JobError(f"{path} is a projector for audio, not images", kind="model_file")
        if mtmd.mtmd_decode_use_mrope(self.ctx):
            # an image's positions then differ from its token count (Qwen-VL's M-RoPE):
            # the batched engine places tokens at their index
            mtmd.mtmd_free(self.ctx)
            raise JobError(f"{path}: models with M-RoPE (Qwen-VL) are not served with images"
                           " yet", kind="bad_model")  # fmt: skip

    def tokenize(
        self, prompt: str, images: list[bytes], add_special: bool
    ) -> tuple[list[int], Images]:
        """The prompt's tokens, each image as its placeholder ids, and where each is."""
        mtmd = self._mtmd
        if prompt.count(IMAGE_MARKER) != len(images):
            raise JobError(f"the prompt has {prompt.count(IMAGE_MARKER)} places for images and"
                           f" the job {len(images)} images", kind="bad_request")  # fmt: skip
        bitmaps = []
        out = Images(chunks=mtmd.mtmd_input_chunks_init())
        try:
            for image in images:
                data = (ctypes.c_ubyte * len(image)).from_buffer_copy(image)
                bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, data, len(image), False)
                if not bitmap:
                    raise JobError("an image cannot be decoded", kind="bad_request")
                bitmaps.append(bitmap)
            text = mtmd.mtmd_input_text()
            encoded = prompt.encode()
            text.text, text.text_len = encoded, len(encoded)
            text.add_special, text.parse_special = add_special, True
            array = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            status = mtmd.mtmd_tokenize(self.ctx, out.chunks, ctypes.byref(text), array,
                                        len(bitmaps))  # fmt: skip
            if status != 0:
                raise JobError(f"the images cannot be read (mtmd_tokenize: {status})",
                               kind="bad_request")  # fmt: skip
            tokens: list[int] = []
            taken = 0  # the images placed so far
            for i in range(mtmd.mtmd_input_chunks_size(out.chunks)):
                chunk = mtmd.mtmd_input_chunks_get(out.chunks, i)
                if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t(0)
                    ids = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    tokens += [int(ids[k]) for k in range(n.value)]
                    continue
                if taken == len(images):  # an image sliced in several chunks (MiniCPM-V)
                    raise JobError("this projector slices images, which this server does not"
                                   " read yet", kind="bad_request")  # fmt: skip
                count = int(mtmd.mtmd_input_chunk_get_n_tokens(chunk))
                out.at[len(tokens)] = (chunk, count)
                tokens += placeholder_ids(images[taken], count)
                taken += 1
        except BaseException:
            self.free(out)
            raise
        finally:
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)
        return tokens, out

    def read(self, lctx: Any, images: Images, position: int, seq_id: int, n_batch: int) -> None:
        """Read the image at `position` into the sequence's cells there."""
        import llama_cpp

        chunk, count = images.at[position]
        after = llama_cpp.llama_pos(0)
        status = self._mtmd.mtmd_helper_eval_chunk_single(
            self.ctx, lctx, chunk, position, seq_id, n_batch, False, ctypes.byref(after)
        )
        if status != 0 or after.value != position + count:
            raise JobError(f"llama.cpp cannot read an image (status {status})",
                           kind="backend_error")  # fmt: skip

    def free(self, images: Images) -> None:
        if images.chunks is not None:
            self._mtmd.mtmd_input_chunks_free(images.chunks)
            images.chunks = None
            images.at = {}

    def close(self) -> None:
        if self.ctx:
            self._mtmd.mtmd_free(self.ctx)
            self.ctx = None
