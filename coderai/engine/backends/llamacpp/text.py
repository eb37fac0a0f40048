"""The text side of a llama.cpp model: its chat template, a job's prompt as tokens (with
its images' placeholders, vision.py), token pieces and text, markers, fill-in-the-middle
tokens and llguidance's view of its vocabulary."""

from __future__ import annotations

import codecs
import ctypes
from typing import Any, cast

from coderai.bus.kinds import JobKind
from coderai.engine.backends.base import FimTokens, Sequence, fill_in_the_middle, known_ids
from coderai.engine.backends.llamacpp.vision import Images, Projector
from coderai.engine.decoding.chat_template import (
    chosen_template,
    knows_tools,
    no_template,
    reasoning_format,
    reasoning_switches,
    tags,
    template_input,
    tool_format,
)
from coderai.engine.decoding.reasoning import opens_reasoning
from coderai.errors import JobError


class Text:
    def __init__(self, lib: Any, model: Any, options: dict[str, Any]) -> None:
        from llama_cpp import llama_chat_format

        self._lib = lib
        self.model = model
        self.vocab = model.vocab
        self.vocabulary = int(model.n_vocab())
        meta: dict[str, str] = model.metadata()
        self.add_bos = meta.get("tokenizer.ggml.add_bos_token", "true") != "false"
        template = chosen_template(options, meta.get("tokenizer.chat_template"))
        self.template = template
        self.tool_format = tool_format(template, options)
        self.reasoning_format = reasoning_format(template, options)
        self.native_tools = knows_tools(template)
        self.call_tags, self.think_tags = tags(template)
        self._grammar_tokenizer: Any = None
        self.formatter: Any = None
        #: the template leaving the assistant's turn unopened (/tokenize may ask for that)
        self.closed_formatter: Any = None
        if template:
            bos = model.token_get_text(model.token_bos()) if model.token_bos() >= 0 else ""
            eos = model.token_get_text(model.token_eos()) if model.token_eos() >= 0 else ""
            self.formatter = llama_chat_format.Jinja2ChatFormatter(template, eos, bos)
            self.closed_formatter = llama_chat_format.Jinja2ChatFormatter(
                template, eos, bos, add_generation_prompt=False
            )
        fim = [f(self.vocab) for f in (lib.llama_vocab_fim_pre,
               lib.llama_vocab_fim_suf, lib.llama_vocab_fim_mid)]  # fmt: skip
        #: the GGUF's fill-in-the-middle tokens (llama.cpp says -1 for one it lacks)
        self.fim: FimTokens | None = (fim[0], fim[1], fim[2]) if min(fim) >= 0 else None
        self._piece = ctypes.create_string_buffer(64)

    def prompt(self, seq: Sequence, projector: Projector | None) -> tuple[list[int], Images | None]:
        """A job's prompt as tokens, and its images where it has some (read with the
        model's `projector`)."""
        job = seq.job
        if job.kind == JobKind.CHAT:
            if self.formatter is None:
                raise no_template()
            formatter = self.formatter if job.add_generation_prompt else self.closed_formatter
            messages, tools = template_input(job, self.template)
            switches = reasoning_switches(job, self.template)
            formatted = formatter(messages=cast(Any, messages), tools=tools, **switches)
            seq.opened = opens_reasoning(formatted.prompt, self.think_tags[0])
            add_bos = self.add_bos and not formatted.added_special
            if job.images:
                if projector is None:
                    raise JobError("this model reads no images", kind="bad_request")
                if not all(isinstance(image, bytes) for image in job.images):
                    raise JobError("a job's images are bytes", kind="bad_request")
                return projector.tokenize(formatted.prompt, list(job.images), add_bos)
            return list(self.model.tokenize(formatted.prompt.encode(), add_bos, True)), None
        if job.images:  # a chat template places them; a raw prompt has no place for them
            raise JobError("images go with chat messages", kind="bad_request")
        if job.prompt_ids:
            return known_ids(job.prompt_ids, self.vocabulary, "prompt"), None
        if job.suffix:
            bos = [self.model.token_bos()] if self.add_bos and self.model.token_bos() >= 0 else []
            return fill_in_the_middle(job, self.fim, self.encode, bos), None
        return list(self.model.tokenize(job.prompt.encode(), self.add_bos, False)), None

    def encode(self, text: str) -> list[int]:
        return list(self.model.tokenize(text.encode(), False, False))

    def marker_ids(self, text: str) -> list[int]:
        """A marker's tokens, special ones read as such."""
        return list(self.model.tokenize(text.encode(), False, True))

    def detokenize(self, ids: list[int]) -> str:
        ids = known_ids(ids, self.vocabulary, "tokens")
        tokens = (self._lib.llama_token * len(ids))(*ids)
        size = 64 + 16 * len(ids)
        while True:  # llama.cpp answers -(bytes needed) when the buffer is too small
            buffer = ctypes.create_string_buffer(size)
            n = self._lib.llama_detokenize(self.vocab, tokens, len(ids), buffer, size, False, True)
            if n >= 0:
                return buffer.raw[:n].decode("utf-8", errors="replace")
            size = -n

    def is_end(self, token: int) -> bool:
        """Whether a token ends generation (end of turn, end of text)."""
        return bool(self._lib.llama_vocab_is_eog(self.vocab, token))

    def piece(self, token: int, special: bool = False) -> bytes:
        """A token's bytes (a special token's text only where `special`)."""
        buffer = self._piece
        n = self._lib.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        if n < 0:  # a piece longer than the buffer: llama.cpp says how long
            buffer = ctypes.create_string_buffer(-n)
            n = self._lib.llama_token_to_piece(self.vocab, token, buffer, -n, 0, special)
        return bytes(buffer.raw[:n])

    def piece_text(self, decoder: codecs.IncrementalDecoder, token: int, special: bool) -> str:
        """A sampled token's text through a sequence's UTF-8 decoder (a character split
        over tokens comes out whole with its last byte)."""
        text: str = decoder.decode(self.piece(token, special))
        return text

    def grammar_tokenizer(self) -> Any:
        """llguidance's view of the vocabulary, built on first use."""
        if self._grammar_tokenizer is None:
            import warnings

            import llguidance.llamacpp

            # llguidance reads token attributes through a llama_cpp alias that warns it is
            # deprecated; the call is right for this pinned llama-cpp-python
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                self._grammar_tokenizer = llguidance.llamacpp.lltokenizer_from_vocab(self.vocab)
        return self._grammar_tokenizer
