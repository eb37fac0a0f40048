"""Many sequences in one llama.cpp context: continuous batching with chunked prefill, a
prefix cache, host RAM below it, and speculative decoding, behind the `ModelInstance` face.

One context per loaded model holds a unified KV cache that up to `parallel` sequences
share. The parts, each in a module of its own (docs/glossary.md has the words):
- planner.py: the waiting line, admission, leaders, growth and preemption, the step plan;
  parking.py: when idle prefix entries go to host RAM (ahead of a prompt or after it);
- cache_manager.py: the cells promised (kv.py), prefix entries (prefix_cache.py),
  sequence ids and checkpoints (checkpoints.py);
- host_tier.py: prompt state saved to host RAM and recalled (ram_cache.py);
- speculation.py: drafts (ngram.py, draft.py) and their verification;
- runner.py: one `llama_decode` per step, positions, sampling;
- text.py: the chat template, tokens and pieces;
- llama_memory.py: the only calls to llama.cpp's sequence memory and state;
- policy.py: how cells may be shared, kept and saved on this model, decided once.

A sequence that finishes leaves a prefix entry: a new sequence whose tokens begin with its
shares those cells (`llama_memory_seq_cp` in a unified cache adds a sequence id to cells,
it copies nothing) and reads only the rest. A preempted sequence reads its tokens again
keeping its sampler (a re-read token's state is computed in another batch shape, which
llama.cpp's quantised kernels do not promise to reproduce bit for bit:
bench/batch_invariance.py).
"""

from __future__ import annotations

import codecs
import logging
from typing import Any

from coderai.bus.messages import Job
from coderai.engine.backends.base import (
    PENDING,
    READING,
    ModelInstance,
    Sequence,
    StepResult,
    as_prompt_job,
    completion_limit,
    fit_prompt,
)
from coderai.engine.backends.llamacpp.attention import ATTENTION, Choice
from coderai.engine.backends.llamacpp.cache_manager import CacheManager
from coderai.engine.backends.llamacpp.checkpoints import Memory
from coderai.engine.backends.llamacpp.disk_cache import DiskCache
from coderai.engine.backends.llamacpp.draft import Drafter
from coderai.engine.backends.llamacpp.host_tier import HostTier
from coderai.engine.backends.llamacpp.kv import cells_needed
from coderai.engine.backends.llamacpp.llama_memory import LlamaMemory, layers
from coderai.engine.backends.llamacpp.ngram import NgramIndex
from coderai.engine.backends.llamacpp.parking import Parking, attend_share
from coderai.engine.backends.llamacpp.planner import Planner
from coderai.engine.backends.llamacpp.policy import cache_policy
from coderai.engine.backends.llamacpp.ram_cache import RamCache
from coderai.engine.backends.llamacpp.repack import KERNELS
from coderai.engine.backends.llamacpp.runner import Runner
from coderai.engine.backends.llamacpp.sampler import SamplerChain
from coderai.engine.backends.llamacpp.settings import BatchSettings
from coderai.engine.backends.llamacpp.slot import Slot
from coderai.engine.backends.llamacpp.speculation import Speculation
from coderai.engine.backends.llamacpp.text import Text
from coderai.engine.backends.llamacpp.vision import Images, Projector
from coderai.engine.holdings import lead_of, leads_of
from coderai.errors import JobError

log = logging.getLogger("coderai.engine")
#: how long an instance that goes may spend saving its prefixes for the disk
PERSIST_SECONDS = 3.0


class LlamaCppBatchInstance(ModelInstance):
    def __init__(
        self,
        model: Any,
        context: Any,
        settings: BatchSettings,
        *,
        drafter: Drafter | None = None,
        projector: Projector | None = None,
        options: dict[str, Any] | None = None,
        disk: DiskCache | None = None,
    ) -> None:
        import llama_cpp

        self.model, self.context = model, context
        ctx = context.ctx
        #: its catalogue id (the backend sets it: the list of models with the extra
        #: buffer types on is kept by id)
        self.model_id = ""
        #: its vision projector (vision.py), where its entry names one
        self.projector = projector
        #: the attention kernel its context was made with, and why (the backend sets it:
        #: attention.py; reported while the instance is loaded)
        self.attention = Choice(settings.flash, "")
        self.capacity = settings.parallel
        self.n_ctx = self.window = int(llama_cpp.llama_n_ctx_seq(ctx))
        self.text = text = Text(llama_cpp, model, options or {})
        self.tool_format, self.reasoning_format = text.tool_format, text.reasoning_format
        self.native_tools, self.call_tags, self.think_tags = (
            text.native_tools, text.call_tags, text.think_tags
        )  # fmt: skip
        memory, sliding_window = layers(llama_cpp, model.model)
        policy = cache_policy(
            memory,
            sliding_window,
            swa_full=settings.swa_full,
            flash=settings.flash,
            host_ram=settings.ram_bytes > 0,
            parallel=settings.parallel,
            entries=settings.entries,
            id_bound=int(llama_cpp.llama_n_seq_max(ctx)),
            checkpoints=settings.checkpoints,
            checkpoint_every=settings.checkpoint_every,
        )
        sequence_memory = LlamaMemory(llama_cpp, ctx, context.memory)
        self.cache = CacheManager(
            policy,
            sequence_memory,
            cells=int(llama_cpp.llama_n_ctx(ctx)),
            parallel=settings.parallel,
            entries=settings.entries,
            cache_tokens=settings.cache_tokens,
        )
        share = attend_share(
            int(llama_cpp.llama_model_n_layer(model.model)),
            int(llama_cpp.llama_model_n_embd(model.model)),
            int(llama_cpp.llama_model_n_params(model.model)),
        )
        # what parks and restores cost, measured as it runs (the runner's prompt tokens)
        parking = Parking(share, lambda: self.runner.per_token)
        ram = RamCache(settings.ram_bytes) if settings.ram_bytes > 0 else None
        self.host = HostTier(ram, self.cache, parking, disk) if ram is not None else None
        if disk is not None and self.host is not None:
            disk.open()
        # a recurrent state cannot drop the drafts it rejects
        speculative = settings.speculative or drafter is not None
        self.speculation = Speculation(
            speculative and memory is not Memory.RECURRENT,
            drafter,
            settings.draft_length,
            sequence_memory,
        )
        self.runner = Runner(
            llama_cpp,
            ctx,
            text=text,
            cache=self.cache,
            speculation=self.speculation,
            projector=projector,
        )
        self.planner = Planner(
            self.cache,
            self.host,
            self.speculation,
            n_batch=self.runner.n_batch,
            reserve_step=settings.reserve_step,
            parking=parking,
            park_step=settings.prefill_step,
        )
        self.prefill_step = settings.prefill_step

    # -- the text side -------------------------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        return {**super().facts(), "vision": self.projector is not None}

    def prompt_tokens(self, seq: Sequence) -> list[int]:
        tokens, images = self.text.prompt(seq, self.projector)
        self._free_images(images)  # counted, not read
        return tokens

    def marker_ids(self, text: str) -> list[int]:
        return self.text.marker_ids(text)

    def tokenize(self, job: Job) -> tuple[list[int], int]:
        return self.prompt_tokens(Sequence(job=as_prompt_job(job))), self.n_ctx

    def detokenize(self, ids: list[int]) -> str:
        return self.text.detokenize(ids)

    def grammar_tokenizer(self) -> Any:
        return self.text.grammar_tokenizer()

    # -- sequences -----------------------------------------------------------------------------
    def start(self, seq: Sequence) -> None:
        tokens, images = self.text.prompt(seq, self.projector)
        try:
            if not tokens:
                raise JobError("the prompt is empty", kind="bad_request")
            # the next token is sampled from the last one's logits, which an image's
            # tokens do not give (its ids are negative: vision.py)
            if tokens[-1] < 0:
                raise JobError("a prompt cannot end with an image", kind="bad_request")
            # to sample completion token k llama.cpp has decoded prompt + k - 1 tokens, so
            # with prompt + completion <= n_ctx no llama_decode ever runs past the context
            fit_prompt(seq, len(tokens), self.n_ctx)
            sampler = SamplerChain(seq.job, self.text.vocabulary, self.n_ctx)
        except JobError:  # the images read so far go too
            self._free_images(images)
            raise
        job = seq.job
        need = cells_needed(len(tokens), completion_limit(job.max_tokens, seq.room))
        ngrams = NgramIndex() if self.speculation.uses_ngrams(bool(images)) else None
        slot = Slot(
            seq=seq,
            seq_id=self.cache.new_id(),  # last: nothing after it can fail
            tokens=tokens,
            sampler=sampler,
            decoder=codecs.getincrementaldecoder("utf-8")(errors="replace"),
            need=need,
            bounded=job.max_tokens is not None,
            ngrams=ngrams,
            images=images,
        )
        seq.state = slot
        self.planner.add(slot)
        self.speculation.started(slot.seq_id)
        seq.lead = lead_of(tokens)

    def release(self, seq: Sequence) -> None:
        slot: Slot | None = seq.state
        if slot is None:
            return
        seq.state = None
        slot.sampler.close()
        self._free_images(slot.images)
        self.planner.release(slot)

    def persist(self) -> None:
        """The engine stops: its prefixes reach the disk, within its stop's time."""
        if self.host is not None:
            self.host.persist(PERSIST_SECONDS, wait=True)

    def unloaded(self) -> None:
        if self.host is not None:  # a model swapped out: its prefixes wait on disk
            try:
                self.host.persist(PERSIST_SECONDS, wait=False)
            except Exception:  # what it could not keep is read again: no reason to stay
                log.exception("model %s: its prefixes could not be saved", self.model_id)
        KERNELS.released(self.model_id)
        ATTENTION.released(self.model_id)
        if self.projector is not None:
            self.projector.close()

    def _free_images(self, images: Images | None) -> None:
        if images is not None and self.projector is not None:
            self.projector.free(images)

    # -- the step ------------------------------------------------------------------------------
    def step(self, seqs: list[Sequence]) -> list[StepResult]:
        slots: list[Slot] = [seq.state for seq in seqs]
        plan = self.planner.plan(slots, self.runner.prompt_budget(self.prefill_step))
        if not plan.runs:
            return [PENDING] * len(seqs)
        moved = {run.slot for run in plan.runs}
        try:
            produced = self.runner.run(plan.runs)
        except JobError as exc:
            for slot in moved:  # what their cells hold is not to be kept or trusted
                self.planner.forget(slot)
            return [exc if seq.state in moved else PENDING for seq in seqs]
        return [produced.get(seq.state, READING if seq.state in moved else PENDING) for seq in seqs]

    def leads(self) -> set[int]:
        leads = leads_of(self.cache.prefixes.heads())
        return leads | self.host.leads() if self.host is not None else leads

    def stats(self) -> dict[str, int]:
        return {
            **self.planner.stats(),
            **self.cache.stats(),
            "steps_aborted": self.runner.aborted,
            **self.speculation.stats(),
            **(self.host.stats() if self.host is not None else {}),
        }
