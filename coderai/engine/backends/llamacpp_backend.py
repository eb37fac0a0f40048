"""llama.cpp backend (llama-cpp-python): GGUF files on the CPU or offloaded to a GPU.

A llama.cpp context holds one sequence's KV cache, so an instance runs one sequence at a
time (capacity 1); parallel requests to one model use more instances
(models.max_model_instances) or wait for this one.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import importlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coderai.bus.messages import JobKind, ModelSpec
from coderai.engine.backends.base import (
    END,
    Backend,
    LoadProgress,
    ModelInstance,
    Sequence,
    StepResult,
    fit_prompt,
    refuse_long_inputs,
)
from coderai.errors import JobError

log = logging.getLogger("coderai.engine")

#: ggml type ids for the KV cache option
_KV_TYPES = {"f32": 0, "f16": 1}
_POOLING_MEAN = 1
DEFAULT_CONTEXT = 4096


@dataclass
class _Row:
    tokens: list[int]
    decoder: codecs.IncrementalDecoder
    generator: Any = None


class LlamaCppBackend(Backend):
    def instance_spec(self, spec: ModelSpec, kind: str) -> ModelSpec:
        # llama.cpp computes embeddings only in a context created for them
        return dataclasses.replace(spec, embedding=True) if kind == JobKind.EMBEDDING else spec

    def load(self, spec: ModelSpec, progress: LoadProgress) -> ModelInstance:
        import llama_cpp

        path = Path(spec.path)
        options = spec.options
        if not path.is_file():
            raise JobError(f"model file {path} does not exist", kind="model_file")
        kv = options.get("kv_cache", "f16")
        if kv not in _KV_TYPES:
            raise JobError(f"kv_cache must be one of {', '.join(_KV_TYPES)}", kind="bad_model")
        gpu_layers = options.get("n_gpu_layers")
        if gpu_layers is None:
            gpu_layers = -1 if llama_cpp.llama_supports_gpu_offload() else 0
        n_ctx = int(options.get("n_ctx") or _default_context(path))
        kwargs: dict[str, Any] = {
            "model_path": str(path),
            "n_ctx": n_ctx,
            "n_gpu_layers": int(gpu_layers),
            "type_k": _KV_TYPES[kv],
            "type_v": _KV_TYPES[kv],
            "verbose": False,
        }
        if spec.embedding:
            # a pooled input is decoded in one batch, so the default batch of 512 tokens
            # would cap inputs below the context
            kwargs.update(embedding=True, pooling_type=_POOLING_MEAN, n_batch=n_ctx, n_ubatch=n_ctx)
        progress.fraction = 0.1
        try:
            with _extra_buffer_types(bool(options.get("extra_buffer_types", False))):
                llm = llama_cpp.Llama(**kwargs)
        except (ValueError, RuntimeError) as exc:
            # llama.cpp says only "Failed to load model"; the file is what the user needs
            raise JobError(
                f"llama.cpp cannot load model file {path}: {exc}", kind="model_file"
            ) from None
        progress.fraction = 1.0
        return LlamaCppInstance(llm)


def _default_context(path: Path) -> int:
    """The model's trained context, capped: a 128k-token KV cache would not fit by default."""
    import llama_cpp

    probe = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        meta = probe.metadata
        trained = int(meta.get(f"{meta.get('general.architecture', 'llama')}.context_length", 0))
    finally:
        probe.close()
    return min(trained or DEFAULT_CONTEXT, DEFAULT_CONTEXT)


@contextlib.contextmanager
def _extra_buffer_types(enabled: bool) -> Iterator[None]:
    """llama.cpp's CPU "extra buffer types" (AMX / repacked weights) crashed the first
    decode of SmolLM2's Q4_1 weights on this project's Xeon machines (SIGSEGV in
    llama_decode), so they are off unless a model entry sets extra_buffer_types. The
    Python binding builds its model parameters from llama_model_default_params() and
    exposes no switch, so the default is adjusted around the constructor; only the loader
    thread constructs models."""
    binding: Any = importlib.import_module("llama_cpp.llama_cpp")  # what llama.py calls
    original = binding.llama_model_default_params

    def params() -> Any:
        p = original()
        p.use_extra_bufts = enabled
        return p

    binding.llama_model_default_params = params
    try:
        yield
    finally:
        binding.llama_model_default_params = original


class LlamaCppInstance(ModelInstance):
    capacity = 1

    def __init__(self, llm: Any) -> None:
        from llama_cpp import llama_chat_format

        self.llm = llm
        meta: dict[str, str] = llm.metadata
        self.add_bos = meta.get("tokenizer.ggml.add_bos_token", "true") != "false"
        template = meta.get("tokenizer.chat_template")
        self.formatter = None
        if template:
            bos = llm._model.token_get_text(llm.token_bos()) if llm.token_bos() >= 0 else ""
            eos = llm._model.token_get_text(llm.token_eos()) if llm.token_eos() >= 0 else ""
            self.formatter = llama_chat_format.Jinja2ChatFormatter(template, eos, bos)

    def prompt_tokens(self, seq: Sequence) -> list[int]:
        job = seq.job
        if job.kind == JobKind.CHAT:
            if self.formatter is None:
                raise JobError("this GGUF has no chat template; use /v1/completions",
                               kind="bad_request")  # fmt: skip
            formatted = self.formatter(messages=job.messages)
            add_bos = self.add_bos and not formatted.added_special
            return list(self.llm.tokenize(formatted.prompt.encode(), add_bos=add_bos, special=True))
        return list(self.llm.tokenize(job.prompt.encode(), add_bos=self.add_bos))

    def start(self, seq: Sequence) -> None:
        tokens = self.prompt_tokens(seq)
        if not tokens:
            raise JobError("the prompt is empty", kind="bad_request")
        # to sample completion token k llama.cpp has decoded prompt + k - 1 tokens, so with
        # prompt + completion <= n_ctx no llama_decode ever runs past the context
        fit_prompt(seq, len(tokens), self.llm.n_ctx())
        seq.state = _Row(tokens, codecs.getincrementaldecoder("utf-8")(errors="replace"))

    def step(self, seqs: list[Sequence]) -> list[StepResult]:
        return [self._next(seq) for seq in seqs]

    def _next(self, seq: Sequence) -> StepResult:
        import llama_cpp

        row: _Row = seq.state
        job = seq.job
        if row.generator is None:
            if job.seed is not None:
                self.llm.set_seed(job.seed)
            row.generator = self.llm.generate(
                row.tokens,
                top_k=0,
                top_p=job.top_p,
                min_p=0.0,
                temp=job.temperature,
                repeat_penalty=1.0,
            )
        token = next(row.generator)
        if llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, token):
            return END
        piece: str = row.decoder.decode(self.llm.detokenize([token]))
        return piece

    def release(self, seq: Sequence) -> None:
        row: _Row | None = seq.state
        if row is not None and row.generator is not None:
            row.generator.close()

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        # counted as Llama.embed tokenises; its n_batch is the most one input may have
        refuse_long_inputs([len(self.llm.tokenize(t.encode())) for t in texts], self.llm.n_batch)
        vectors, tokens = self.llm.embed(texts, truncate=False, return_count=True)
        return [list(map(float, v)) for v in vectors], int(tokens)
