"""llama.cpp backend (llama-cpp-python): GGUF files on the CPU or offloaded to a GPU.

A generation instance is one context that many sequences share (batch.py), made
through llama.cpp's own API; an embedding instance is a separate context made for pooled
embeddings (llama-cpp-python's Llama), since llama.cpp computes them only in such a one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import psutil

from coderai.bus.kinds import JobKind
from coderai.bus.messages import ModelSpec
from coderai.catalogue.model_memory import (
    CONTEXT_FLOOR,
    KV_BYTES,
    KV_SHARE,
    bytes_per_token,
    context_for_memory,
    for_gguf,
    sequences,
)
from coderai.engine import die_at
from coderai.engine.backends.base import (
    Backend,
    EmbeddingInputs,
    LoadProgress,
    ModelInstance,
    Sequence,
    StepResult,
    check_input_lengths,
    input_ids,
)
from coderai.engine.backends.llamacpp import attention, disk_cache
from coderai.engine.backends.llamacpp.attention import ATTENTION
from coderai.engine.backends.llamacpp.batch import LlamaCppBatchInstance
from coderai.engine.backends.llamacpp.disk_cache import DiskCache
from coderai.engine.backends.llamacpp.draft import Drafter
from coderai.engine.backends.llamacpp.machine import FILES, STATE_VARIABLE
from coderai.engine.backends.llamacpp.repack import KERNELS
from coderai.engine.backends.llamacpp.settings import BatchSettings
from coderai.engine.backends.llamacpp.vision import Projector
from coderai.errors import JobError

log = logging.getLogger("coderai.engine")

#: the KV cache's element types (ggml's type ids) and their bytes per value: a q8_0 block
#: holds 32 values in 34 bytes, a q4_0 block in 18
_KV_TYPES = {"f32": 0, "f16": 1, "q8_0": 8, "q4_0": 2}
#: llama.cpp keeps a quantized V cache only with flash attention
_QUANTIZED = frozenset({"q8_0", "q4_0"})
_POOLING_MEAN = 1
_FLASH_OFF, _FLASH_ON = 0, 1
#: the largest embedding context made when the entry names none
EMBEDDING_CONTEXT = 4096
#: completion tokens promised at a time to a request without max_tokens
RESERVE_STEP = 256
#: how long a step that reads a prompt may take while other sequences decode
PREFILL_STEP_MS = 500
#: checkpoints of window or recurrent state kept per sequence, and the prompt tokens
#: between two (one is also taken where each prompt ends)
CHECKPOINTS, CHECKPOINT_EVERY = 8, 4096
#: host RAM for prompt state the KV cache lets go, by default: this share of the memory
#: available at load, at most RAM_CACHE_MOST bytes
RAM_CACHE_SHARE, RAM_CACHE_MOST = 0.1, 8 << 30


class LlamaCppBackend(Backend):
    def facts(self) -> dict[str, Any]:
        return {"extra_buffer_types": KERNELS.report(), "attention": ATTENTION.report()}

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
        if kv in _QUANTIZED and not options.get("flash_attn", True):
            raise JobError(
                f"kv_cache {kv} needs flash_attn: llama.cpp quantizes the V cache only with"
                " flash attention",
                kind="bad_model",
            )
        gpu_layers = options.get("n_gpu_layers")
        if gpu_layers is None:
            gpu_layers = -1 if llama_cpp.llama_supports_gpu_offload() else 0
        progress.fraction = 0.1
        # an embedding instance's id differs from its model's generating one
        model_id = f"{spec.id} (embeddings)" if spec.embedding else spec.id
        repack = KERNELS.decide(options.get("extra_buffer_types"), str(path), model_id).on
        if die_at.RULES:
            die_at.at("load", repack)
        instance: LlamaCppBatchInstance | LlamaCppEmbedder | None = None
        try:
            load = self._load_embedder if spec.embedding else self._load_generator
            instance = load(spec, path, int(gpu_layers), kv, repack)
            instance.model_id, instance.extra_buffer_types = model_id, repack
            if isinstance(instance, LlamaCppBatchInstance):
                ATTENTION.loaded(model_id, instance.attention)
            return instance
        except (ValueError, RuntimeError) as exc:
            # llama.cpp says only "Failed to load model"; the file is what the user needs
            raise JobError(
                f"llama.cpp cannot load model file {path}: {exc}", kind="model_file"
            ) from None
        finally:
            progress.fraction = 1.0
            if instance is None:
                # a model that did not load is not in use: off the list of those with
                # the extra buffer types on (repack.py)
                KERNELS.released(model_id)

    def _load_generator(
        self, spec: ModelSpec, path: Path, gpu_layers: int, kv: str, repack: bool
    ) -> LlamaCppBatchInstance:
        import llama_cpp
        from llama_cpp._internals import LlamaContext, LlamaModel

        options = spec.options
        _init_backend()
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = gpu_layers
        model_params.use_extra_bufts = repack
        model = LlamaModel(path_model=str(path), params=model_params, verbose=False)
        trained = model.n_ctx_train()
        per_token = bytes_per_token(model.metadata(), KV_BYTES[kv])
        n_ctx = int(options.get("n_ctx") or 0) or context_for_memory(
            trained, per_token, int(psutil.virtual_memory().available * KV_SHARE), CONTEXT_FLOOR
        )
        on_gpu = gpu_layers != 0 and llama_cpp.llama_supports_gpu_offload()
        if not on_gpu:
            weights = int(llama_cpp.llama_model_size(model.model))
            mmproj = options.get("mmproj")  # its projector's weights load beside it
            if isinstance(mmproj, str) and Path(mmproj).is_file():
                weights += Path(mmproj).stat().st_size
            _check_room(spec, model.metadata(), model.n_vocab(), weights, n_ctx)
        # a sequence id per running sequence and per kept prefix (one per running sequence
        # at most), and one to save part of a sequence's cells through (host_tier.py, save;
        # left out where llama.cpp's bound on sequences is reached)
        parallel, ids = sequences(
            {**options, "prefix_cache_tokens": options.get("prefix_cache_tokens", n_ctx)}, on_gpu
        )
        n_batch = int(options.get("n_batch") or 512)
        cores = len(os.sched_getaffinity(0))
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        cache_tokens = int(options.get("prefix_cache_tokens", n_ctx))
        # a windowed model's window layers keep only their window (as llama-server does):
        # a kept prefix is reused where what is held or a checkpoint covers it
        swa_full = bool(options.get("swa_full", False))
        params.n_seq_max = ids
        params.kv_unified = True  # every sequence may use the whole context
        params.n_threads = int(options.get("n_threads") or cores)
        params.n_threads_batch = int(options.get("n_threads_batch") or cores)
        params.type_k = params.type_v = _KV_TYPES[kv]
        params.swa_full = swa_full
        params.no_perf = True
        chosen = _kernel(model, options, on_gpu, kv, n_ctx)
        log.info("model %s: flash attention %s: %s", spec.id, "on" if chosen.flash else "off",
                 chosen.why)  # fmt: skip
        flash = chosen.flash
        params.flash_attn_type = _FLASH_ON if flash else _FLASH_OFF
        ngram, draft = _speculative(options.get("speculative"))
        if options.get("draft_length") is not None and not (ngram or draft):
            raise JobError("draft_length needs speculative (\"ngram\" or a draft model)",
                           kind="bad_model")  # fmt: skip
        context = LlamaContext(model=model, params=params, verbose=False)
        projector = _projector(options.get("mmproj"), model.model, params.n_threads, on_gpu)
        log.info(
            "model %s: context of %d tokens (trained %d; KV cache %.0f MiB, %s), %d sequences"
            " at once, %d/%d threads, flash attention %s",
            spec.id, n_ctx, trained, n_ctx * per_token / (1 << 20), kv, parallel,
            params.n_threads, params.n_threads_batch, "on" if flash else "off",
        )  # fmt: skip
        settings = BatchSettings(
            parallel=parallel,
            reserve_step=int(options.get("reserve_tokens") or RESERVE_STEP),
            cache_tokens=cache_tokens,
            prefill_step=float(options.get("prefill_step_ms") or PREFILL_STEP_MS) / 1000,
            # a full-size window cache holds what a checkpoint would, at every position
            checkpoints=0 if swa_full else int(options.get("checkpoints", CHECKPOINTS)),
            checkpoint_every=int(options.get("checkpoint_every") or CHECKPOINT_EVERY),
            swa_full=swa_full,
            flash=flash,
            ram_bytes=_ram_cache_bytes(options.get("prompt_cache_ram_mb")),
            speculative=ngram,
            draft_length=None
            if options.get("draft_length") is None
            else int(options["draft_length"]),
        )
        drafter = Drafter(draft, model, params) if draft is not None else None
        compat = {"model": _file_identity(path), "build": llama_cpp.__version__,
                  "kv": kv, "flash": flash, "swa_full": swa_full,
                  # an image's tokens name its bytes, not its embeddings: the projector
                  # that made them belongs to the state too
                  "mmproj": _file_identity(options.get("mmproj"))}  # fmt: skip
        disk = _disk_cache(compat, options.get("prompt_cache_disk_mb"))
        instance = LlamaCppBatchInstance(
            model,
            context,
            settings,
            drafter=drafter,
            projector=projector,
            options=options,
            disk=disk,
        )
        instance.attention = chosen
        return instance

    def _load_embedder(
        self, spec: ModelSpec, path: Path, gpu_layers: int, kv: str, repack: bool
    ) -> LlamaCppEmbedder:
        import llama_cpp

        # a pooled input is decoded in one batch, so the default batch of 512 tokens would
        # cap inputs below the context
        n_ctx = int(spec.options.get("n_ctx") or _embedding_context(path))
        with _extra_buffer_types(repack):
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_gpu_layers=gpu_layers,
                type_k=_KV_TYPES[kv],
                type_v=_KV_TYPES[kv],
                flash_attn=kv in _QUANTIZED or bool(spec.options.get("flash_attn", False)),
                embedding=True,
                pooling_type=_POOLING_MEAN,
                n_batch=n_ctx,
                n_ubatch=n_ctx,
                verbose=False,
            )
        return LlamaCppEmbedder(llm)


def _projector(option: object, model: Any, threads: int, on_gpu: bool) -> Projector | None:
    """The entry's vision projector (`mmproj`: the path of its GGUF), loaded beside the
    model; None without one."""
    if option is None:
        return None
    if not isinstance(option, str) or not Path(option).is_file():
        raise JobError(f"mmproj must be the path of a vision projector's GGUF file, not "
                       f"{option!r}", kind="bad_model")  # fmt: skip
    return Projector(option, model, threads, on_gpu)


def _check_room(
    spec: ModelSpec, metadata: dict[str, str], vocab: int, weights: int, n_ctx: int
) -> None:
    """Before llama.cpp allocates a context on the CPU: one this machine cannot hold at all
    (its RAM and swap) is refused with the sizes and the context that would fit, where
    llama.cpp would fail to allocate or the kernel kill the engine; one larger than the RAM
    available now is loaded with a warning (pages are only taken as they are used)."""
    arch = metadata.get("general.architecture", "llama")
    metadata = {f"{arch}.vocab_size": str(vocab), **metadata}
    memory = psutil.virtual_memory()
    machine = memory.total + psutil.swap_memory().total
    options = {**spec.options, "n_ctx": n_ctx}
    found = for_gguf(metadata, weights, options, False, memory.available, memory.available, "RAM")
    need = f"a context of {n_ctx:,} tokens takes about {found.total >> 20:,} MiB"
    if found.total > machine:
        raise JobError(f"model {spec.id}: {need}, more than this machine's {machine >> 20:,} MiB; "
                       f"the largest context that fits the RAM available now is "
                       f"{found.largest_context:,} (set n_ctx)", kind="bad_model")  # fmt: skip
    if found.total > memory.available:
        log.warning("model %s: %s, more than the %d MiB available now", spec.id, need,
                    memory.available >> 20)  # fmt: skip


def _kernel(
    model: Any, options: dict[str, Any], on_gpu: bool, kv: str, n_ctx: int
) -> attention.Choice:
    """The attention kernel a model's context is made with (attention.py)."""
    import llama_cpp

    raw = model.model
    metadata = model.metadata()
    arch = metadata.get("general.architecture", "llama")
    heads, kv_heads = (
        int(llama_cpp.llama_model_n_head(raw)),
        int(llama_cpp.llama_model_n_head_kv(raw)),
    )
    width = int(llama_cpp.llama_model_n_embd(raw))
    key = int(metadata.get(f"{arch}.attention.key_length") or width // max(heads, 1))
    value = int(metadata.get(f"{arch}.attention.value_length") or key)
    timeable = None
    if llama_cpp.llama_model_is_recurrent(raw) or llama_cpp.llama_model_is_hybrid(raw):
        timeable = "a recurrent or hybrid model"
    elif not (heads and kv_heads):
        timeable = "a model with no attention heads in its first layer"
    elif key != value:
        timeable = "a model whose keys and values differ in size"
    fixed = attention.rule(
        options.get("flash_attn"), on_gpu=on_gpu, quantized=kv in _QUANTIZED,
        windowed=llama_cpp.llama_model_n_swa(raw) > 0, timeable=timeable,
    )  # fmt: skip
    shape = attention.Shape(heads, kv_heads, key, _KV_TYPES[kv])
    layers = int(llama_cpp.llama_model_n_layer(raw))
    return attention.kernel_for(fixed, shape, layers, n_ctx, _kept)


def _kept(
    key: str, take: Callable[[], dict[str, Any]], fresh: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    return FILES.kept("attention", key, take, fresh)


def flash_for(path: str, options: dict[str, Any], n_ctx: int) -> bool:
    """Whether the engine would load a GGUF on the CPU with flash attention, as it
    chooses it (its vocabulary and shape alone are read): what a peer measured beside
    it is given (bench/)."""
    import llama_cpp
    from llama_cpp._internals import LlamaModel

    _init_backend()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = LlamaModel(path_model=path, params=params, verbose=False)
    return _kernel(model, options, False, str(options.get("kv_cache", "f16")), n_ctx).flash


def _speculative(option: object) -> tuple[bool, Path | None]:
    """What a model entry asks of speculative decoding: n-gram drafts (`"ngram"`), or a
    draft model (`{"draft": "<model id>"}`, whose file the front adds as `path`)."""
    if option is None or option is False:
        return False, None
    if option == "ngram":
        return True, None
    if isinstance(option, dict) and set(option) == {"draft", "path"}:
        return False, Path(str(option["path"]))
    if isinstance(option, dict) and "draft" in option:
        raise JobError(
            f"draft model {option['draft']!r}: its file is not known here (a draft model"
            " is named by its catalogue id, on the same machine)",
            kind="bad_model",
        )
    raise JobError(
        f'speculative must be "ngram" or {{"draft": "<model id>"}}, not {option!r}',
        kind="bad_model",
    )


def _file_identity(option: object) -> list[object] | None:
    """A file's path, size and modification time, or None (no such file)."""
    if not isinstance(option, str | Path) or not Path(option).is_file():
        return None
    stat = Path(option).stat()
    return [str(Path(option).resolve()), stat.st_size, stat.st_mtime_ns]


def _disk_cache(compat: dict[str, Any], megabytes: object) -> DiskCache | None:
    """A model's prompt cache on disk, in its front's state folder: the entry's
    `prompt_cache_disk_mb` bounds it (0 turns it off), else disk_cache.DEFAULT_MB. None
    for an engine no front's state folder was given (an instance made outside a server)."""
    state = os.environ.get(STATE_VARIABLE)
    size = disk_cache.DEFAULT_MB if megabytes is None else int(cast(Any, megabytes))
    if not state or size <= 0:
        return None
    return DiskCache(Path(state) / "prompt-cache", compat, size << 20)


def _ram_cache_bytes(megabytes: object) -> int:
    """The host RAM bound of a model's prompt cache: the entry's `prompt_cache_ram_mb` (0
    turns it off), else a share of the memory available now."""
    if megabytes is not None:
        return int(cast(Any, megabytes)) << 20
    return min(int(psutil.virtual_memory().available * RAM_CACHE_SHARE), RAM_CACHE_MOST)


def _embedding_context(path: Path) -> int:
    """The model's trained context, capped: an embedding input is decoded in one batch,
    whose buffers grow with it."""
    import llama_cpp

    probe = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        meta = probe.metadata
        trained = int(meta.get(f"{meta.get('general.architecture', 'llama')}.context_length", 0))
    finally:
        probe.close()
    return min(trained or EMBEDDING_CONTEXT, EMBEDDING_CONTEXT)


_backend_ready = False


def _init_backend() -> None:
    """llama.cpp's one-time global set-up (Llama does it too; only the loader thread
    loads)."""
    global _backend_ready
    if not _backend_ready:
        import llama_cpp
        from llama_cpp._logger import set_verbose

        set_verbose(False)  # llama.cpp's load and context lines, on stderr, unless errors
        llama_cpp.llama_backend_init()
        _backend_ready = True


@contextlib.contextmanager
def _extra_buffer_types(enabled: bool) -> Iterator[None]:
    """llama.cpp's CPU "extra buffer types" (AMX / repacked weights), on or off (as
    repack.py decides). The Python binding builds its model
    parameters from llama_model_default_params() and exposes no switch, so the default is
    adjusted around the constructor; only the loader thread constructs models."""
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


class LlamaCppEmbedder(ModelInstance):
    """A context made for pooled embeddings; it generates nothing."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.model_id = ""

    def unloaded(self) -> None:
        KERNELS.released(self.model_id)

    def start(self, seq: Sequence) -> None:
        raise JobError("this instance computes embeddings only", kind="unsupported")

    def step(self, seqs: list[Sequence]) -> list[StepResult]:
        raise JobError("this instance computes embeddings only", kind="unsupported")

    def embed(self, inputs: EmbeddingInputs) -> tuple[list[list[float]], int]:
        llm = self.llm
        # a text is tokenised as Llama.embed tokenises it
        lists = input_ids(inputs, int(llm.n_vocab()), lambda text: llm.tokenize(text.encode()))
        # an input is decoded in one batch: n_batch is the most one may have
        check_input_lengths([len(ids) for ids in lists], llm.n_batch)
        return self._pooled(lists), sum(len(ids) for ids in lists)

    def _pooled(self, lists: list[list[int]]) -> list[list[float]]:
        """The mean-pooled vectors of token-id lists, batched as Llama.embed batches texts:
        inputs share a decode, one sequence each, while they fit. (Llama.embed takes text
        only, and a token-id input is embedded as the ids given, never re-tokenised.)"""
        import llama_cpp

        llm = self.llm
        ctx, batch = llm._ctx, llm._batch
        width, room, most = llm.n_embd(), llm.n_batch, llm.context_params.n_seq_max
        vectors: list[list[float]] = []

        def decode(count: int) -> None:
            ctx.kv_cache_clear()
            ctx.decode(batch)
            batch.reset()
            for seq in range(count):
                pooled = llama_cpp.llama_get_embeddings_seq(ctx.ctx, seq)
                vectors.append([float(x) for x in pooled[:width]])

        batch.reset()
        sequences = tokens = 0
        for ids in lists:
            if tokens + len(ids) > room or sequences >= most:
                decode(sequences)
                sequences = tokens = 0
            # every token an output: llama.cpp pools the outputs (Llama.embed does the same)
            batch.add_sequence(ids, sequences, True)
            sequences += 1
            tokens += len(ids)
        decode(sequences)
        ctx.kv_cache_clear()
        return vectors
