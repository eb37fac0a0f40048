"""transformers backend: a local folder (config.json + safetensors) or a GGUF file, placed
with accelerate over the engine's GPUs or on the CPU, decoding a dynamic batch.

Dynamic batching: one instance keeps every running sequence in one left-padded batch with a
shared KV cache. A new request is prefilled alone and merged into the batch between two
decode steps; a finished one is cut out. Each decode step is then one forward pass for all
sequences, so parallel requests share the model instead of needing a copy each.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from coderai.bus.messages import Job, JobKind, ModelSpec
from coderai.engine.backends.base import (
    END,
    Backend,
    LoadProgress,
    ModelInstance,
    Sequence,
    StepResult,
    fit_prompt,
    refuse_long_inputs,
    token_biases,
)
from coderai.engine.detok import IncrementalDetokenizer
from coderai.engine.gpu_memory import max_memory_plan
from coderai.engine.sampling import adjust_logits, choose_token, make_generator
from coderai.errors import JobError

log = logging.getLogger("coderai.engine")

_DTYPES = ("float32", "bfloat16", "float16")


def cache_root() -> Path:
    return Path(os.environ.get("CODERAI_CACHE_DIR") or Path.home() / ".cache" / "coderai")


def gguf_cache_dir(path: Path) -> Path:
    """Where the converted weights of one GGUF file live: keyed by path, size and mtime."""
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return cache_root() / "gguf-hf" / key.hexdigest()[:24]


def choose_dtype(options: dict[str, Any], cuda: bool, bf16: bool) -> str:
    """The entry's dtype if it names one, else bf16/fp16 on a GPU and fp32 on the CPU."""
    wanted = options.get("dtype")
    if wanted is not None:
        if wanted not in _DTYPES:
            raise JobError(f"dtype must be one of {', '.join(_DTYPES)}", kind="bad_model")
        return str(wanted)
    if cuda:
        return "bfloat16" if bf16 else "float16"
    return "float32"


@dataclass
class _Row:
    ids: list[int]
    generator: Any
    detok: IncrementalDetokenizer
    #: the request's logit_bias by token id, and how often each token was generated
    bias: dict[int, float] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)


class TransformersBackend(Backend):
    def load(self, spec: ModelSpec, progress: LoadProgress) -> ModelInstance:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(spec.path)
        options = spec.options
        if not path.exists():
            raise JobError(f"model file {path} does not exist", kind="model_file")
        cuda = torch.cuda.is_available()
        dtype = choose_dtype(options, cuda, cuda and torch.cuda.is_bf16_supported())
        kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype), "local_files_only": True}
        if cuda:
            totals = [torch.cuda.get_device_properties(i).total_memory
                      for i in range(torch.cuda.device_count())]  # fmt: skip
            plan = max_memory_plan(totals, options, psutil.virtual_memory().available)
            if plan is not None:
                kwargs["device_map"], kwargs["max_memory"] = plan
        source, gguf_file, cache = _source(path)
        progress.fraction = 0.1
        try:
            model = AutoModelForCausalLM.from_pretrained(source, gguf_file=gguf_file, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(
                source, gguf_file=gguf_file, local_files_only=True
            )
        except (OSError, ValueError, RuntimeError) as exc:
            raise JobError(f"cannot load model {path}: {exc}", kind="model_file") from None
        progress.fraction = 0.8
        if cache is not None:
            _save_converted(model, tokenizer, cache)
        model.eval()
        progress.fraction = 1.0
        return TransformersInstance(model, tokenizer)


def _source(path: Path) -> tuple[str, str | None, Path | None]:
    """(folder to load, gguf file name or None, cache folder to fill or None)."""
    if path.is_dir():
        return str(path), None, None
    cached = gguf_cache_dir(path)
    if (cached / "config.json").is_file():
        log.info("loading %s from converted cache %s", path, cached)
        return str(cached), None, None
    log.info("converting GGUF %s for transformers (cached for next time)", path)
    return str(path.parent), path.name, cached


def _save_converted(model: Any, tokenizer: Any, target: Path) -> None:
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    # The GGUF weights were dequantised on load, but transformers still marks the model
    # as gguf-quantised and refuses to save it; what is saved is plain weights.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)
    except OSError as exc:  # a cache is an optimisation: failing to write it is not fatal
        log.warning("could not cache converted weights in %s: %s", target, exc)
        shutil.rmtree(tmp, ignore_errors=True)


class TransformersInstance(ModelInstance):
    # one forward pass decodes every row of the batch, so a held row is decoded anyway and
    # its text waits in the engine's outbox
    can_hold = False

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = model.get_input_embeddings().weight.device
        eos = model.generation_config.eos_token_id
        eos_ids = eos if isinstance(eos, list) else [eos]
        self.eos = {i for i in [*eos_ids, tokenizer.eos_token_id] if i is not None}
        self.context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.rows: list[Sequence] = []
        self.cache: Any = None
        self.mask: Any = None  # [rows, length] 1 = real token, 0 = left padding
        self.pos: Any = None  # [rows] position of each row's next input token
        self.next_ids: Any = None  # [rows] the token each row feeds next

    # -- prompts ----------------------------------------------------------------------------
    def prompt_ids(self, job: Job) -> list[int]:
        if job.kind == JobKind.CHAT:
            text = self.tokenizer.apply_chat_template(
                job.messages, add_generation_prompt=True, tokenize=False
            )
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            ids = self.tokenizer(job.prompt)["input_ids"]
        return list(ids)

    def start(self, seq: Sequence) -> None:
        ids = self.prompt_ids(seq.job)
        if not ids:
            raise JobError("the prompt is empty", kind="bad_request")
        # past max_position_embeddings a model either fails (learned positions) or quietly
        # degrades (rotary ones), so the completion ends at the context instead
        fit_prompt(seq, len(ids), self.context)
        decode = lambda t: self.tokenizer.decode(t, skip_special_tokens=True)  # noqa: E731
        # the width of the output layer: every config has one, not every one a vocab_size
        bias: dict[int, float] = {}
        if seq.job.logit_bias:
            width = int(self.model.get_output_embeddings().weight.shape[0])
            bias = token_biases(seq.job.logit_bias, width)
        seq.state = _Row(ids, make_generator(seq.job.seed), IncrementalDetokenizer(decode), bias)

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        """Mean of the last hidden states over each text's tokens."""
        import torch

        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        enc = self.tokenizer(texts, padding=True, return_tensors="pt")
        refuse_long_inputs(enc["attention_mask"].sum(dim=1).tolist(), self.context)
        enc = enc.to(self.device)
        with torch.inference_mode():
            out = self.model(**enc, output_hidden_states=True)
            mask = enc["attention_mask"].unsqueeze(-1).to(out.hidden_states[-1].dtype)
            vectors = (out.hidden_states[-1] * mask).sum(dim=1) / mask.sum(dim=1)
        return vectors.float().cpu().tolist(), int(enc["attention_mask"].sum())

    # -- decoding ---------------------------------------------------------------------------
    def step(self, seqs: list[Sequence]) -> list[StepResult]:
        import torch

        results: dict[int, StepResult] = {}
        with torch.inference_mode():
            if self.rows:
                for seq, token in zip(self.rows, self._decode_step(), strict=True):
                    results[id(seq)] = self._emit(seq, token)
            running = {id(s) for s in self.rows}
            for seq in seqs:
                if id(seq) not in running:
                    results[id(seq)] = self._emit(seq, self._prefill(seq))
        return [results[id(s)] for s in seqs]

    def _decode_step(self) -> list[int]:
        import torch

        ones = torch.ones((len(self.rows), 1), dtype=self.mask.dtype, device=self.device)
        self.mask = torch.cat([self.mask, ones], dim=1)
        out = self.model(
            input_ids=self.next_ids[:, None],
            attention_mask=self.mask,
            position_ids=self.pos[:, None],
            cache=self.cache,
            use_cache=True,
        )
        self.cache = out.cache
        tokens = self._choose(out.logits[:, -1, :])
        self.pos = self.pos + 1
        self.next_ids = torch.tensor(tokens, device=self.device)
        return tokens

    def _prefill(self, seq: Sequence) -> int:
        import torch

        row: _Row = seq.state
        ids = torch.tensor([row.ids], device=self.device)
        out = self.model(input_ids=ids, use_cache=True)
        token = self._choose(out.logits[:, -1, :], [seq])[0]
        self._merge(seq, out.cache, len(row.ids), token)
        return token

    def _choose(self, logits: Any, seqs: list[Sequence] | None = None) -> list[int]:
        import torch

        seqs = self.rows if seqs is None else seqs
        rows = logits.float().cpu()
        for i, seq in enumerate(seqs):
            row: _Row = seq.state
            adjust_logits(rows[i], seq.job, row.bias, row.counts)
        greedy = torch.argmax(rows, dim=-1).tolist()
        out = []
        for i, seq in enumerate(seqs):
            job = seq.job
            if job.temperature <= 0:
                token = int(greedy[i])
            else:
                token = choose_token(rows[i], job, seq.state.generator)
            counts = seq.state.counts
            counts[token] = counts.get(token, 0) + 1
            out.append(token)
        return out

    def _emit(self, seq: Sequence, token: int) -> StepResult:
        if token in self.eos:
            return END
        row: _Row = seq.state
        return row.detok.add(token)

    # -- the batch --------------------------------------------------------------------------
    def _merge(self, seq: Sequence, cache: Any, length: int, token: int) -> None:
        """Add a prefilled sequence to the batch, left-padding whichever side is shorter."""
        import torch
        import torch.nn.functional as F

        new_mask = torch.ones((1, length), dtype=torch.long, device=self.device)
        if not self.rows:
            self.cache, self.mask = cache, new_mask
            self.pos = torch.tensor([length], device=self.device)
            self.next_ids = torch.tensor([token], device=self.device)
            self.rows = [seq]
            return
        width = max(self.mask.shape[1], length)
        grow_old, grow_new = width - self.mask.shape[1], width - length
        for old, new in zip(self.cache.layers, cache.layers, strict=True):
            old.keys = torch.cat(
                [F.pad(old.keys, (0, 0, grow_old, 0)), F.pad(new.keys, (0, 0, grow_new, 0))]
            )
            old.values = torch.cat(
                [F.pad(old.values, (0, 0, grow_old, 0)), F.pad(new.values, (0, 0, grow_new, 0))]
            )
        self.mask = torch.cat([F.pad(self.mask, (grow_old, 0)), F.pad(new_mask, (grow_new, 0))])
        self.pos = torch.cat([self.pos, torch.tensor([length], device=self.device)])
        self.next_ids = torch.cat([self.next_ids, torch.tensor([token], device=self.device)])
        self.rows.append(seq)

    def release(self, seq: Sequence) -> None:
        import torch

        if seq not in self.rows:
            return
        keep = [i for i, s in enumerate(self.rows) if s is not seq]
        self.rows = [self.rows[i] for i in keep]
        if not self.rows:
            self.cache = self.mask = self.pos = self.next_ids = None
            return
        index = torch.tensor(keep, device=self.device)
        self.mask, self.pos, self.next_ids = self.mask[index], self.pos[index], self.next_ids[index]
        # drop padding columns no remaining row needs, so the batch does not stay wide
        first = int(torch.nonzero(self.mask.any(dim=0))[0])
        self.mask = self.mask[:, first:]
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, first:]
            layer.values = layer.values[index, :, first:]
