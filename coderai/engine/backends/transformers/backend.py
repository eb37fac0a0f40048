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

from coderai.bus.kinds import JobKind
from coderai.bus.messages import Job, ModelSpec
from coderai.engine.backends.base import (
    END,
    Backend,
    EmbeddingInputs,
    FimTokens,
    LoadProgress,
    ModelInstance,
    Sequence,
    StepResult,
    as_prompt_job,
    check_input_lengths,
    fill_in_the_middle,
    fit_prompt,
    input_ids,
    known_ids,
    token_biases,
)
from coderai.engine.backends.transformers.detok import IncrementalDetokenizer
from coderai.engine.backends.transformers.gpu_memory import max_memory_plan
from coderai.engine.backends.transformers.sampling import (
    adjust_logits,
    choose_token,
    make_generator,
)
from coderai.engine.backends.transformers.token_bytes import TokenBytes
from coderai.engine.decoding import structured
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

log = logging.getLogger("coderai.engine")

_DTYPES = ("float32", "bfloat16", "float16")
#: how tokenizers spell their fill-in-the-middle tokens (prefix, suffix, middle): Qwen2.5-
#: Coder's, StarCoder's, CodeLlama's (bare and as its vocabulary writes them) and
#: DeepSeek-Coder's
FIM_SPELLINGS = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    ("<PRE>", "<SUF>", "<MID>"),
    ("\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>"),
    ("<\uff5cfim\u2581begin\uff5c>", "<\uff5cfim\u2581hole\uff5c>", "<\uff5cfim\u2581end\uff5c>"),
)


def cache_root() -> Path:
    return Path(os.environ.get("CODERAI_CACHE_DIR") or Path.home() / ".cache" / "coderai")


def gguf_cache_dir(path: Path) -> Path:
    """Where the converted weights of one GGUF file live: keyed by path, size and mtime."""
    stat = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return cache_root() / "gguf-hf" / key.hexdigest()[:24]


def fim_tokens(vocabulary: dict[str, int]) -> FimTokens | None:
    """A tokenizer's fill-in-the-middle token ids, found by their usual spellings; None
    for a model that has none."""
    for spelling in FIM_SPELLINGS:
        if all(token in vocabulary for token in spelling):
            pre, suf, mid = (vocabulary[token] for token in spelling)
            return pre, suf, mid
    return None


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
        return TransformersInstance(model, tokenizer, options)


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

    def __init__(self, model: Any, tokenizer: Any, options: dict[str, Any] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = model.get_input_embeddings().weight.device
        eos = model.generation_config.eos_token_id
        eos_ids = eos if isinstance(eos, list) else [eos]
        self.eos = {i for i in [*eos_ids, tokenizer.eos_token_id] if i is not None}
        self.context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.window = self.context if self.context < 1 << 30 else 0
        # tokens the tokenizer knows and the model embeds (its table may have spare rows)
        rows = int(model.get_input_embeddings().weight.shape[0])
        self.vocabulary = min(len(tokenizer), rows)
        self.fim = fim_tokens(tokenizer.get_vocab())
        # the BOS this tokenizer puts before a text, if it does: a FIM prompt starts with it
        bos = tokenizer.bos_token_id
        self.bos = [bos] if bos is not None and tokenizer("")["input_ids"][:1] == [bos] else []
        self.rows: list[Sequence] = []
        # the entry's template, where it gives one, is the tokenizer's from here on
        tokenizer.chat_template = chosen_template(options or {}, tokenizer.chat_template)
        self.tool_format = tool_format(tokenizer.chat_template, options or {})
        self.reasoning_format = reasoning_format(tokenizer.chat_template, options or {})
        self.native_tools = knows_tools(tokenizer.chat_template)
        if isinstance(tokenizer.chat_template, str):  # not several templates by name
            self.call_tags, self.think_tags = tags(tokenizer.chat_template)
        self._grammar_tokenizer: Any = None
        self._bytes_of = TokenBytes(tokenizer)
        self.cache: Any = None
        self.mask: Any = None  # [rows, length] 1 = real token, 0 = left padding
        self.pos: Any = None  # [rows] position of each row's next input token
        self.next_ids: Any = None  # [rows] the token each row feeds next

    # -- prompts ----------------------------------------------------------------------------
    def prompt_ids(self, job: Job, seq: Sequence | None = None) -> list[int]:
        """The job's prompt as ids; a chat job's sequence learns whether its prompt left
        a `<think>` open."""
        if job.kind == JobKind.CHAT:
            if not self.tokenizer.chat_template:
                raise no_template()
            messages, tools = template_input(job, self.tokenizer.chat_template)
            text = self.tokenizer.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=job.add_generation_prompt,
                tokenize=False,
                **reasoning_switches(job, self.tokenizer.chat_template),
            )
            if seq is not None:
                seq.opened = opens_reasoning(text, self.think_tags[0])
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        elif job.prompt_ids:
            ids = known_ids(job.prompt_ids, self.vocabulary, "prompt")
        elif job.suffix:
            ids = fill_in_the_middle(job, self.fim, self._encode, self.bos)
        else:
            ids = self.tokenizer(job.prompt)["input_ids"]
        return list(ids)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def tokenize(self, job: Job) -> tuple[list[int], int]:
        return self.prompt_ids(as_prompt_job(job)), self.context

    def detokenize(self, ids: list[int]) -> str:
        text: str = self.tokenizer.decode(known_ids(ids, self.vocabulary, "tokens"))
        return text

    def marker_ids(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer.encode(text, add_special_tokens=False)
        return ids

    def start(self, seq: Sequence) -> None:
        ids = self.prompt_ids(seq.job, seq)
        if not ids:
            raise JobError("the prompt is empty", kind="bad_request")
        # past max_position_embeddings a model either fails (learned positions) or quietly
        # degrades (rotary ones), so the completion ends at the context instead
        fit_prompt(seq, len(ids), self.context)
        # call markers may be special tokens: a sequence that parses calls keeps them
        decode = lambda t: self.tokenizer.decode(t, skip_special_tokens=not seq.render_special)  # noqa: E731
        # the width of the output layer: every config has one, not every one a vocab_size
        bias: dict[int, float] = {}
        if seq.job.logit_bias:
            width = int(self.model.get_output_embeddings().weight.shape[0])
            bias = token_biases(seq.job.logit_bias, width)
        seq.state = _Row(ids, make_generator(seq.job.seed), IncrementalDetokenizer(decode), bias)

    def embed(self, inputs: EmbeddingInputs) -> tuple[list[list[float]], int]:
        """Mean of the last hidden states over each input's tokens."""
        import torch

        lists = input_ids(inputs, self.vocabulary, lambda t: self.tokenizer(t)["input_ids"])
        check_input_lengths([len(ids) for ids in lists], self.context)
        # padded on the right, so that every input's positions start at 0
        width = max(len(ids) for ids in lists)
        batch = torch.tensor([x + [0] * (width - len(x)) for x in lists], device=self.device)
        mask = torch.tensor(
            [[1] * len(x) + [0] * (width - len(x)) for x in lists], device=self.device
        )
        with torch.inference_mode():
            out = self.model(input_ids=batch, attention_mask=mask, output_hidden_states=True)
            weights = mask.unsqueeze(-1).to(out.hidden_states[-1].dtype)
            vectors = (out.hidden_states[-1] * weights).sum(dim=1) / weights.sum(dim=1)
        return vectors.float().cpu().tolist(), sum(len(ids) for ids in lists)

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
        logprobs: dict[int, Any] = {}
        for i, seq in enumerate(seqs):
            row: _Row = seq.state
            structured.constrain_torch(seq, rows[i])
            if seq.logprobs is not None:  # the model's, under the grammar, before sampling
                logprobs[i] = structured.log_softmax(rows[i].numpy().copy())
            adjust_logits(rows[i], seq.job, row.bias, row.counts)
        greedy = torch.argmax(rows, dim=-1).tolist()
        out = []
        for i, seq in enumerate(seqs):
            job = seq.job
            if seq.forced:  # a thinking budget's end marker: chosen whatever the logits say
                token = seq.forced.pop(0)
            elif job.temperature <= 0:
                token = int(greedy[i])
            else:
                token = choose_token(rows[i], job, seq.state.generator)
            counts = seq.state.counts
            counts[token] = counts.get(token, 0) + 1
            if seq.constraint is not None:
                structured.sampled(seq, token)
            if i in logprobs and seq.logprobs is not None:
                seq.logprobs.append(
                    structured.logprob_entry(logprobs[i], token, job.top_logprobs, self._bytes_of)
                )
            out.append(token)
        return out

    def grammar_tokenizer(self) -> Any:
        if self._grammar_tokenizer is None:
            import llguidance.hf

            width = int(self.model.get_output_embeddings().weight.shape[0])
            self._grammar_tokenizer = llguidance.hf.from_tokenizer(
                self.tokenizer, n_vocab=width, eos_token=sorted(self.eos)
            )
        return self._grammar_tokenizer

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
