"""Many sequences in one llama.cpp context: continuous batching with chunked prefill.

One context per loaded model holds a unified KV cache that up to `parallel` sequences
share. Each step is one `llama_decode` over one token of every decoding sequence and the
next chunk of the prompts being read, oldest first. While others decode, a chunk is sized
so that a step takes about `prefill_step` seconds (from the measured cost of a token read),
so a long prompt delays the other streams by that much a step instead of freezing them;
alone, a prompt is read `n_batch` tokens a step. A sequence joins between steps once the
KV cells it needs can be promised to it (`kv.py`); one that finishes leaves and its cells
are freed at once.

When a sequence ends, its cells may be kept in a prefix cache (prefix_cache.py): a new
sequence whose tokens begin with a kept one's shares those cells (`llama_memory_seq_cp`
in a unified cache adds a sequence id to cells, it copies nothing) and reads only the rest.
The KV accounting counts shared cells once per owner, so it can only overstate what is
used; when a sequence needs room (to join or to grow), kept entries go first, least
recently used.

A request without max_tokens is promised cells a few at a time. When one cannot grow, it
pauses (the others go on); when every sequence that could move is paused, the youngest is
preempted: its cells are freed and it reads its tokens again once there is room, keeping
its sampler, so its text goes on from where it was (a re-read token's state is computed
in another batch shape, which llama.cpp's quantised kernels do not promise to reproduce
bit for bit: bench/batch_invariance.py).
"""

from __future__ import annotations

import codecs
import ctypes
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, cast

from coderai.bus.kinds import JobKind
from coderai.bus.messages import Job
from coderai.engine.backends import structured
from coderai.engine.backends.base import (
    END,
    PENDING,
    READING,
    FimTokens,
    ModelInstance,
    Sequence,
    StepResult,
    as_prompt_job,
    completion_limit,
    fill_in_the_middle,
    fit_prompt,
    known_ids,
)
from coderai.engine.backends.llamacpp.checkpoints import (
    Checkpoint,
    Held,
    Memory,
    due,
    kept,
    last_point,
    reusable,
    whole,
)
from coderai.engine.backends.llamacpp.draft import Drafter
from coderai.engine.backends.llamacpp.draft_policy import (
    PRIOR_KEPT,
    Shadow,
    StepCosts,
    best_length,
    updated_kept,
)
from coderai.engine.backends.llamacpp.kv import KvLedger, cells_needed, grown, reservation
from coderai.engine.backends.llamacpp.ngram import NgramIndex
from coderai.engine.backends.llamacpp.prefix_cache import PrefixCache, common_prefix
from coderai.engine.backends.llamacpp.ram_cache import RamCache, Saved
from coderai.engine.backends.llamacpp.repack import KERNELS
from coderai.engine.backends.llamacpp.sampler import SamplerChain
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

#: the fewest prompt tokens read in a step while others decode (and before any is measured)
MIN_CHUNK = 16
#: llama_state_seq_*_ext: only the state that cannot be cut back (window cells, recurrent)
_PARTIAL = 1
#: what llama_decode returns when its abort callback said stop
_ABORTED = 2
#: the fewest tokens past a shared prefix for which a kept entry taken over is saved to
#: host RAM first, where its whole state is saved (reading fewer again costs less than
#: copying it all out); where only its cells past the shared ones are, MIN_CHUNK (fewer,
#: such as the one token a whole prefix taken over leaves, are read again at no cost)
RAM_TAIL = 256


def worth_taking(gained: int, held: int) -> bool:
    """Whether starting from a kept or saved state that holds `held` tokens, for the
    `gained` a sequence need then not read, is worth it: for RAM_TAIL tokens or more,
    or for at least half of what it holds."""
    return gained >= RAM_TAIL or 2 * gained >= held


#: speculative decoding: the most draft tokens a sequence decodes in a step, and the most
#: sequences decoding in a step for drafts to be tried at all (with more, the batch
#: already fills a step: drafts would slow every sequence more than they gain)
DRAFT_MOST, DRAFT_SEQUENCES = 8, 4


@dataclass(eq=False)
class _Slot:
    """One sequence in the context."""

    seq: Sequence
    seq_id: int
    #: the prompt, then each token sampled
    tokens: list[int]
    sampler: SamplerChain
    decoder: codecs.IncrementalDecoder
    #: the most KV cells it can ever use, and whether the request bounded its length
    need: int
    bounded: bool
    #: tokens[:decoded] are in the KV cache
    decoded: int = 0
    admitted: bool = False
    #: admission order: the youngest is preempted first
    order: int = 0
    #: admitted at least once (a preempted sequence is admitted again)
    started: bool = False
    #: an older sequence reading the same prompt, and how many of its tokens this one
    #: copies once it has read them (n choices of one request share one prefill)
    leader: _Slot | None = None
    shared: int = 0
    #: speculative decoding: the n-gram index of its tokens, and this step's draft
    ngrams: NgramIndex | None = None
    draft: list[int] = field(default_factory=list)
    #: the estimated chance that a draft token of its is kept (draft_policy.py)
    kept_rate: float = PRIOR_KEPT
    #: an n-gram draft not decoded (none paid), checked against what it samples next
    shadow: Shadow = field(default_factory=Shadow)
    #: its prompt's images, each read as a step of its own where it starts (vision.py)
    images: Images | None = None


@dataclass(eq=False)
class _Plan:
    """What one step decodes: (slot, first position, end position) runs."""

    runs: list[tuple[_Slot, int, int]] = field(default_factory=list)
    paused: list[_Slot] = field(default_factory=list)


class LlamaCppBatchInstance(ModelInstance):
    def __init__(
        self,
        model: Any,
        context: Any,
        *,
        parallel: int,
        reserve_step: int,
        cache_tokens: int,
        prefill_step: float,
        checkpoints: int = 0,
        checkpoint_every: int = 4096,
        swa_full: bool = True,
        flash: bool = True,
        ram_bytes: int = 0,
        speculative: bool = False,
        drafter: Drafter | None = None,
        draft_length: int | None = None,
        options: dict[str, Any] | None = None,
        projector: Projector | None = None,
    ) -> None:
        import llama_cpp
        from llama_cpp import llama_chat_format
        from llama_cpp._internals import LlamaBatch

        self._lib: Any = llama_cpp
        #: its vision projector (vision.py), where its entry names one
        self.projector = projector
        #: its catalogue id (the backend sets it: the list of models with the extra
        #: buffer types on is kept by id)
        self.model_id = ""
        self.model = model
        self.context = context
        self.ctx = context.ctx
        self.vocab = model.vocab
        self.vocabulary = int(model.n_vocab())
        self.capacity = parallel
        # llama.cpp caps the batch at the context: the tokens one step may decode
        self.n_batch = int(llama_cpp.llama_n_batch(self.ctx))
        self.reserve_step = reserve_step
        self.prefill_step = prefill_step
        #: seconds a step takes per token it decodes, measured on steps that read prompts
        self._per_token: float | None = None
        self.n_ctx = self.window = int(llama_cpp.llama_n_ctx_seq(self.ctx))
        self.ledger = KvLedger(int(llama_cpp.llama_n_ctx(self.ctx)))
        self._batch = LlamaBatch(n_tokens=self.n_batch, embd=0, n_seq_max=1, verbose=False)
        #: a kept entry per running sequence at most: each has its own sequence id
        self.cache = PrefixCache(cache_tokens, parallel if cache_tokens else 0, self.ledger.cost)
        self._free_ids = list(range(parallel + self.cache.max_entries - 1, -1, -1))
        #: sequences started and not yet promised cells, in arrival order
        self._waiting: deque[_Slot] = deque()
        #: every sequence started here and not yet released
        self._slots: set[_Slot] = set()
        self._admissions = itertools.count()
        self._preemptions = 0
        self._piece = ctypes.create_string_buffer(64)
        handle = model.model
        self.window = int(llama_cpp.llama_model_n_swa(handle))
        if llama_cpp.llama_model_is_recurrent(handle) or llama_cpp.llama_model_is_hybrid(handle):
            self.memory = Memory.RECURRENT
        else:
            self.memory = Memory.WINDOW if self.window > 0 else Memory.FULL
        #: checkpoints of partial state, by sequence id (a kept prefix keeps its sequence's)
        self.max_checkpoints = checkpoints if self.memory is not Memory.FULL else 0
        self.checkpoint_every = checkpoint_every
        self._checkpoints: dict[int, list[Checkpoint]] = {}
        self._restored = 0
        #: a window cache sized for each sequence's window (not swa_full) frees a cell only
        #: once one sequence alone holds it: two live sequences sharing cells could hold
        #: the whole of it, and a decode would find no room. There a sequence that starts
        #: from a kept prefix takes it over, and none copies a running one's cells.
        self._private = self.memory is Memory.WINDOW and not swa_full
        #: a sequence started from another's cells shares them, and the ledger counts them
        #: once (kv.KvLedger.share), where cells are all a sequence's state: beside a
        #: window or a recurrent state a restore may fail, and the cells be read again
        self._linked = self.memory is Memory.FULL
        #: a sequence id no sequence has: part of a sequence's cells are copied to it to
        #: be saved (llama.cpp saves all of a sequence's cells), and a saved state is
        #: restored into it and copied from there
        scratch = parallel + self.cache.max_entries
        self._scratch = (
            scratch
            if self.cache.max_entries and scratch < llama_cpp.llama_n_seq_max(self.ctx)
            else None
        )
        #: sequences whose prompt the running step reads: a CANCEL for one of them stops
        #: the step within a graph node (llama.cpp's abort callback, set for such steps
        #: only: it is called from every node). A recurrent state half-advanced by an
        #: aborted step could not be taken back, so those models finish their step.
        self._watched: list[_Slot] = []
        self._abort = llama_cpp.ggml_abort_callback(self._cancelled)
        self._no_abort = llama_cpp.ggml_abort_callback()
        self._aborted = 0
        #: prefixes let go from the KV cache, and preempted sequences, saved in host RAM
        self.ram = RamCache(ram_bytes) if ram_bytes > 0 else None
        if self.ram is not None:
            self.cache.on_evict = self._save
        #: without flash attention, attention computes every used cell of the cache (up
        #: to the highest used one) for every token read, other sequences' cells too,
        #: masked: an idle kept prefix makes every running sequence slower (a 1.3k-token
        #: prompt read beside 2.1k idle cells: 10.2 s against 6.3 s on SmolLM2). There
        #: only running sequences and what they share stay in the cache: a finished
        #: sequence's cells past those it shares go to host RAM (an agent's own turns
        #: beside a system prompt others share: a few MB, ~10 ms each way); a kept prefix
        #: a new sequence starts from is taken over, its cells past the shared ones saved;
        #: and kept prefixes no running sequence shares are saved and let go when one is
        #: admitted (_park_idle). They come back when their conversation does.
        self._park = (
            self._linked and not flash and self.ram is not None and self._scratch is not None
        )
        #: n-gram drafts (ngram.py); a recurrent state cannot drop the drafts it rejects
        self.speculative = (speculative or drafter is not None) and (
            self.memory is not Memory.RECURRENT
        )
        #: a draft model's context (draft.py), where drafts come from one
        self.drafter = drafter if self.speculative else None
        #: what steps cost by their tokens, for the draft lengths that pay (draft_policy.py),
        #: unless the model entry fixed the length
        self._costs = StepCosts()
        self.draft_length = draft_length
        self._drafted = self._accepted = 0
        #: sequences ended here: a reader of the published counters can tell they are
        #: from after a given sequence ended (they are published a few times a second)
        self._released = 0
        meta: dict[str, str] = model.metadata()
        self.add_bos = meta.get("tokenizer.ggml.add_bos_token", "true") != "false"
        template = chosen_template(options or {}, meta.get("tokenizer.chat_template"))
        self.template = template
        self.tool_format = tool_format(template, options or {})
        self.reasoning_format = reasoning_format(template, options or {})
        self.native_tools = knows_tools(template)
        self.call_tags, self.think_tags = tags(template)
        self._grammar_tokenizer: Any = None
        self.formatter = None
        #: the template leaving the assistant's turn unopened (/tokenize may ask for that)
        self.closed_formatter: Any = None
        if template:
            bos = model.token_get_text(model.token_bos()) if model.token_bos() >= 0 else ""
            eos = model.token_get_text(model.token_eos()) if model.token_eos() >= 0 else ""
            self.formatter = llama_chat_format.Jinja2ChatFormatter(template, eos, bos)
            self.closed_formatter = llama_chat_format.Jinja2ChatFormatter(
                template, eos, bos, add_generation_prompt=False
            )
        fim = [f(self.vocab) for f in (llama_cpp.llama_vocab_fim_pre,
               llama_cpp.llama_vocab_fim_suf, llama_cpp.llama_vocab_fim_mid)]  # fmt: skip
        #: the GGUF's fill-in-the-middle tokens (llama.cpp says -1 for one it lacks)
        self.fim: FimTokens | None = (fim[0], fim[1], fim[2]) if min(fim) >= 0 else None

    # -- sequences --------------------------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        return {**super().facts(), "vision": self.projector is not None}

    def prompt_tokens(self, seq: Sequence) -> list[int]:
        tokens, images = self._prompt(seq)
        if images is not None and self.projector is not None:
            self.projector.free(images)  # counted, not read
        return tokens

    def _prompt(self, seq: Sequence) -> tuple[list[int], Images | None]:
        """The prompt's tokens, and its images where the job has some (vision.py)."""
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
                if self.projector is None:
                    raise JobError("this model reads no images", kind="bad_request")
                if not all(isinstance(image, bytes) for image in job.images):
                    raise JobError("a job's images are bytes", kind="bad_request")
                return self.projector.tokenize(formatted.prompt, list(job.images), add_bos)
            return list(self.model.tokenize(formatted.prompt.encode(), add_bos, True)), None
        if job.images:  # a chat template places them; a raw prompt has no place for them
            raise JobError("images go with chat messages", kind="bad_request")
        if job.prompt_ids:
            return known_ids(job.prompt_ids, self.vocabulary, "prompt"), None
        if job.suffix:
            bos = [self.model.token_bos()] if self.add_bos and self.model.token_bos() >= 0 else []
            return fill_in_the_middle(job, self.fim, self._encode, bos), None
        return list(self.model.tokenize(job.prompt.encode(), self.add_bos, False)), None

    def _encode(self, text: str) -> list[int]:
        return list(self.model.tokenize(text.encode(), False, False))

    def marker_ids(self, text: str) -> list[int]:
        return list(self.model.tokenize(text.encode(), False, True))

    def tokenize(self, job: Job) -> tuple[list[int], int]:
        return self.prompt_tokens(Sequence(job=as_prompt_job(job))), self.n_ctx

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

    def start(self, seq: Sequence) -> None:
        tokens, images = self._prompt(seq)
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
        except JobError:
            if images is not None and self.projector is not None:
                self.projector.free(images)
            raise
        job = seq.job
        limit = completion_limit(job.max_tokens, seq.room)
        try:
            sampler = SamplerChain(job, self.vocabulary, self.n_ctx)
        except JobError:  # a bad logit_bias: the images read so far go too
            if images is not None and self.projector is not None:
                self.projector.free(images)
            raise
        slot = _Slot(
            seq=seq,
            seq_id=self._free_ids.pop(),  # last: nothing after it can fail
            tokens=tokens,
            sampler=sampler,
            decoder=codecs.getincrementaldecoder("utf-8")(errors="replace"),
            need=cells_needed(len(tokens), limit),
            bounded=job.max_tokens is not None,
            # drafts would propose an image's placeholder ids: none where it has images
            ngrams=NgramIndex()
            if self.speculative and self.drafter is None and not images
            else None,
            images=images,
        )
        seq.state = slot
        self._slots.add(slot)
        self._waiting.append(slot)
        if self.drafter is not None:  # what the id's last sequence left there
            self.drafter.forget(slot.seq_id)

    def grammar_tokenizer(self) -> Any:
        if self._grammar_tokenizer is None:
            import warnings

            import llguidance.llamacpp

            # llguidance reads token attributes through a llama_cpp alias that warns it is
            # deprecated; the call is right for this pinned llama-cpp-python
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                self._grammar_tokenizer = llguidance.llamacpp.lltokenizer_from_vocab(self.vocab)
        return self._grammar_tokenizer

    def unloaded(self) -> None:
        KERNELS.released(self.model_id)
        if self.projector is not None:
            self.projector.close()

    def release(self, seq: Sequence) -> None:
        slot: _Slot | None = seq.state
        if slot is None:
            return
        seq.state = None
        self._released += 1
        self._slots.discard(slot)
        slot.sampler.close()
        if slot.images is not None and self.projector is not None:
            self.projector.free(slot.images)
        if slot in self._waiting:
            self._waiting.remove(slot)
        if not (slot.admitted and slot.decoded and self.cache.max_entries):
            self._free_cells(slot.seq_id)
            self._free_ids.append(slot.seq_id)
            return
        if self._park and self.ledger.base(slot.seq_id) is not None:
            self._save(slot.seq_id, slot.tokens[: slot.decoded])
            self._free_cells(slot.seq_id)
            self._free_ids.append(slot.seq_id)
            return
        # its cells are kept: the entry's promise shrinks to what they hold
        self.ledger.reserve(slot.seq_id, slot.decoded)
        for seq_id in self.cache.add(slot.seq_id, slot.tokens[: slot.decoded]):
            self._free_cells(seq_id)
            self._free_ids.append(seq_id)
        while self.cache.over() and self._evict_one():
            pass

    def _free_cells(self, seq_id: int) -> None:
        """Free what a sequence id holds in the cache and in the ledger. Cells it shares
        with another sequence (a kept prefix) stay, held by that one."""
        self._lib.llama_memory_seq_rm(self.context.memory, seq_id, -1, -1)
        self.ledger.release(seq_id)
        self._checkpoints.pop(seq_id, None)

    def _evict_one(self, keep: int | None = None) -> bool:
        """Let the least recently used kept prefix (but `keep`) go; False if none is."""
        kept = self.cache.evict(keep)
        if kept is None:
            return False
        self._free_cells(kept)
        self._free_ids.append(kept)
        return True

    def _reserve(self, slot: _Slot, cells: int, keep: int | None = None) -> bool:
        """Promise a sequence `cells`, letting kept prefixes (but `keep`) go while that
        does not fit."""
        while not self.ledger.reserve(slot.seq_id, cells):
            if not self._evict_one(keep):
                return False
        return True

    def _adopt(self, slot: _Slot, hit: tuple[int, int], cells: int) -> bool:
        """A sequence that does not fit beside the kept prefix it starts from takes that
        prefix's cells over instead of evicting it: they are its prompt's, and the entry's
        own hold is let go. A long prompt resent (an agent's next turn, as long as the
        context allows) so keeps its prefix. False if it does not fit even so."""
        kept, shared = hit
        trial = self.ledger.copy()
        if self._linked:
            trial.share(slot.seq_id, kept, shared)
        trial.release(kept)
        if not trial.reserve(slot.seq_id, cells):
            return False
        self._share(kept, slot, shared)
        self._let_go(kept, shared)
        reserved = self.ledger.reserve(slot.seq_id, cells)
        assert reserved, "the entry's cells were counted as room"
        return True

    def _let_go(self, kept: int, shared: int) -> None:
        """A kept prefix a sequence has started from is no longer kept: its id's hold is
        freed, the cells it shares stay, held by that sequence. Where the entry held many
        more tokens than are shared (another agent's conversation beyond a common system
        prompt), it is saved to host RAM first, for that conversation's next turn."""
        tokens = self.cache.tokens_of(kept)
        tail = len(tokens) - shared
        if self.ram is not None and (tail >= RAM_TAIL or (tail >= MIN_CHUNK and self._tails())):
            self._save(kept, tokens)
        self.cache.take(kept)
        self._free_cells(kept)
        self._free_ids.append(kept)

    def stats(self) -> dict[str, int]:
        admitted = [s for s in self._slots if s.admitted]
        return {
            "running": len(admitted),
            "waiting": len(self._waiting),
            "kv_used": sum(s.decoded for s in admitted),
            "kv_reserved": self.ledger.reserved,
            "kv_cells": self.ledger.cells,
            "preempted": self._preemptions,
            "prefix_hits": self.cache.hits,
            "prefix_tokens": self.cache.reused,
            "prefix_cached": self.cache.tokens,
            "checkpoints": sum(len(c) for c in self._checkpoints.values()),
            "checkpoint_bytes": sum(len(p.data) for c in self._checkpoints.values() for p in c),
            "checkpoints_restored": self._restored,
            "steps_aborted": self._aborted,
            "released": self._released,
            "draft_tokens": self._drafted,
            "draft_accepted": self._accepted,
            **(self._ram_stats() if self.ram is not None else {}),
        }

    def _ram_stats(self) -> dict[str, int]:
        ram = self.ram
        assert ram is not None
        return {
            "ram_cache_entries": len(ram),
            "ram_cache_bytes": ram.bytes,
            "ram_cache_saves": ram.saves,
            "ram_cache_hits": ram.hits,
            "ram_cache_tokens": ram.restored_tokens,
            "ram_cache_restore_ms": ram.restore_ms,
        }

    def _forget_cells(self, slot: _Slot) -> None:
        self._free_cells(slot.seq_id)
        slot.decoded = 0
        slot.admitted = False

    def _admit(self) -> None:
        """Promise cells to waiting sequences in arrival order while the cache has room."""
        admitted_any = False
        while self._waiting:
            slot = self._waiting[0]
            want = reservation(len(slot.tokens), slot.need, slot.bounded, self.reserve_step)
            # the prefix it will start from is kept while others go for room; if even so
            # it does not fit, it takes that prefix's cells over (_adopt). A prefix it
            # covers whole is taken over first: kept, it would only hold the same cells
            # twice over (its release keeps the longer one), and others need not go
            hit = self._match(slot.tokens)
            whole = hit is not None and hit[1] >= self.cache.length(hit[0]) - 1
            if self._park and hit and not worth_taking(hit[1], self.cache.length(hit[0])):
                # a few tokens in common with another conversation (a chat template's
                # first ones) are read again: taken, they would leave its state saved
                # past them, which only a sequence that holds them again could restore
                hit = None
            keep = hit[0] if hit else None
            admitted = bool(whole and hit and self._adopt(slot, hit, want))
            if not admitted:
                if hit and self._linked:  # beside it, only what it adds counts
                    self.ledger.share(slot.seq_id, *hit)
                admitted = self._reserve(slot, want, keep) or bool(
                    hit and self._adopt(slot, hit, want)
                )
            if not admitted:
                self.ledger.release(slot.seq_id)
                break
            self._waiting.popleft()
            slot.admitted = True
            slot.order = next(self._admissions)
            self._reuse(slot, None if slot.decoded else hit)
            admitted_any = True
        if self._park and admitted_any:
            self._park_idle()

    def _park_idle(self) -> None:
        """Save the kept prefixes no admitted sequence shares, and none a waiting one
        would start from, to host RAM and let them go (`_park`). What RAM cannot hold
        beside what this call saved stays (reading it again would cost more than the
        cells it keeps idle, and a save must not push out another just parked)."""
        assert self.ram is not None
        busy = {base[0] for s in self._slots
                if s.admitted and (base := self.ledger.base(s.seq_id)) is not None}  # fmt: skip
        busy |= {hit[0] for s in self._waiting if (hit := self._match(s.tokens)) is not None}
        room = self.ram.max_bytes
        for idle in [i for i in self.cache.ids() if i not in busy]:
            if room <= 0:
                return
            saved = self._save(idle, self.cache.tokens_of(idle), most=room)
            if saved:
                room -= saved
                self.cache.take(idle)
                self._free_cells(idle)
                self._free_ids.append(idle)

    def _reuse(self, slot: _Slot, hit: tuple[int, int] | None) -> None:
        """Start from the kept cells that share the longest prefix with its tokens, `hit`
        (none if it took a prefix's cells over as it was admitted)."""
        if hit is not None:
            kept, shared = hit
            self._share(kept, slot, shared)
            if self._private or self._park:
                self._let_go(kept, shared)
        if self.ram is not None:
            self._recall(slot)
        if not slot.started:  # a preempted sequence reading its tokens again is no new hit
            slot.started = True
            slot.seq.cached_tokens = slot.decoded
            if slot.decoded:
                self.cache.count_hit(slot.decoded)
        self._find_leader(slot)

    # -- state that cannot be cut back (checkpoints.py) ------------------------------------
    def _match(self, tokens: list[int]) -> tuple[int, int] | None:
        if self.memory is Memory.FULL:
            return self.cache.match(tokens)
        return self.cache.match(tokens, self._usable)

    def _held(self, seq_id: int) -> Held:
        memory = self.context.memory
        last = int(self._lib.llama_memory_seq_pos_max(memory, seq_id))
        first = int(self._lib.llama_memory_seq_pos_min(memory, seq_id))
        return Held(max(first, 0), last + 1)

    def _usable(self, seq_id: int, common: int) -> int:
        taken = [c.tokens for c in self._checkpoints.get(seq_id, ())]
        return reusable(common, self._held(seq_id), self.memory, self.window, taken)[0]

    def _share(self, kept: int, slot: _Slot, tokens: int) -> None:
        """Start a sequence from the first `tokens` tokens of another's cells: its
        full-attention cells are shared, and where the other's window or recurrent state
        does not cover that prefix, the checkpoint taken there is restored. Without one
        (or if it cannot be restored) the sequence reads its prompt from the start."""
        lib, memory = self._lib, self.context.memory
        held = self._held(kept) if self.memory is not Memory.FULL else None
        lib.llama_memory_seq_cp(memory, kept, slot.seq_id, 0, tokens)
        slot.decoded = tokens
        if self._linked:
            self.ledger.share(slot.seq_id, kept, tokens)
        if held is not None and not self._complete(
            slot.seq_id, tokens, held, self._checkpoints.get(kept, [])
        ):
            slot.decoded = 0

    def _complete(self, sid: int, tokens: int, held: Held, points: list[Checkpoint]) -> bool:
        """A sequence given the cells of another's first `tokens` tokens, whose window or
        recurrent state reached `held` there: it keeps the checkpoints up to `tokens`, and
        where that state does not cover them the checkpoint taken there is restored. False
        (its cells let go, its promise kept) where none is, or it cannot be restored."""
        self._checkpoints[sid] = [c for c in points if c.tokens <= tokens]
        if whole(tokens, held, self.memory, self.window):
            return True
        point = next((c for c in points if c.tokens == tokens), None)
        if point is not None and self._restore(sid, point):
            return True
        self._lib.llama_memory_seq_rm(self.context.memory, sid, -1, -1)
        self._checkpoints.pop(sid, None)
        return False

    # -- host RAM (ram_cache.py) -------------------------------------------------------------
    def _state(self, seq_id: int, flags: int, most: int | None = None) -> bytearray | None:
        """A sequence's state as llama.cpp writes it (None if empty or over `most` bytes),
        written straight into the memory that keeps it: a copy more, or a zeroed buffer
        more, costs ~0.4 s a copy for the ~400 MB of a 17k-token SmolLM2 sequence."""
        lib = self._lib
        size = int(lib.llama_state_seq_get_size_ext(self.ctx, seq_id, flags))
        if size <= 0 or (most is not None and size > most):
            return None
        data = bytearray(size)
        view = (ctypes.c_uint8 * size).from_buffer(data)
        written = int(lib.llama_state_seq_get_data_ext(self.ctx, view, size, seq_id, flags))
        del view  # its export of `data` ends here, so `data` may shrink
        if written <= 0:
            return None
        del data[written:]
        return data

    def _set_state(self, seq_id: int, data: bytes | bytearray, flags: int) -> bool:
        """Load a state `_state` wrote (read in place) into a sequence."""
        size = len(data)
        array = ctypes.c_uint8 * size
        buffer = (
            array.from_buffer(data) if isinstance(data, bytearray) else array.from_buffer_copy(data)
        )
        return (
            int(self._lib.llama_state_seq_set_data_ext(self.ctx, buffer, size, seq_id, flags)) > 0
        )

    def _tails(self) -> bool:
        """Whether part of a sequence's cells can be saved (and restored beside others)."""
        return self._linked and self._scratch is not None

    def _save(self, seq_id: int, tokens: list[int], most: int | None = None) -> int:
        """Copy a sequence's state to host RAM before its cells are freed: where cells
        it shares stay in the cache (with its base, or another that shares them), only
        those past them (an agent's own turns after a system prompt others share: a few
        MB, not the hundreds of the whole). The bytes saved: 0 if nothing was (all of
        it stays in the cache, or RAM did not take it, or it is over `most` bytes)."""
        assert self.ram is not None
        start = self.ledger.staying(seq_id) if self._tails() else 0
        if start >= len(tokens):
            return 0
        source = seq_id
        if start > 0:
            assert self._scratch is not None
            source = self._scratch
            self._lib.llama_memory_seq_cp(self.context.memory, seq_id, source, start, -1)
        bound = self.ram.max_bytes if most is None else min(self.ram.max_bytes, most)
        data = self._state(source, 0, bound)
        held = self._held(source)
        if source != seq_id:
            self._lib.llama_memory_seq_rm(self.context.memory, source, -1, -1)
        if data is None:
            return 0
        points = list(self._checkpoints.get(seq_id, ()))
        if self.memory is Memory.WINDOW:  # llama.cpp writes the cells the window sees
            held = Held(max(held.first, held.end - self.window), held.end)
        saved = Saved(list(tokens), data, held, points, start)
        return saved.size if self.ram.put(saved) else 0

    def _gives(self, saved: Saved, common: int) -> int:
        taken = [c.tokens for c in saved.checkpoints]
        return reusable(common, saved.held, self.memory, self.window, taken)[0]

    def _recall(self, slot: _Slot) -> None:
        """Go on from a state saved in RAM where that gives more of its tokens than the
        KV cache did (`_recall_tail` where parts of states are saved)."""
        if self._tails():
            while self._recall_tail(slot):  # a conversation's turns, saved one by one
                pass
            return
        self._recall_whole(slot)

    def _recall_tail(self, slot: _Slot) -> bool:
        """Restore a saved state that begins within the cells a sequence has and gives
        more: into the scratch sequence (in the room the cache has now: cells no one is
        promised, and those promised to it that it does not use), from where the cells
        past those it has are copied. True if it did."""
        assert self.ram is not None and self._scratch is not None
        lib, memory, sid, scratch = self._lib, self.context.memory, slot.seq_id, self._scratch
        base = self.ledger.base(sid)
        have = slot.decoded
        own = have - (base[1] if base else 0)
        room = self.ledger.free() + self.ledger.cost(sid) - own

        def gives(saved: Saved, common: int) -> int:
            return 0 if saved.start > have else self._gives(saved, common)

        hit = self.ram.match(slot.tokens, gives, room)
        if hit is None or hit[1] <= have:
            return False
        saved, tokens = hit
        if (
            self._park
            and not worth_taking(tokens - have, len(saved.tokens) - saved.start)
            and not self.ram.continues(slot.tokens, have, tokens)
        ):
            # a few tokens from a larger state (a chat template's first ones from another
            # conversation): reading them costs less than loading it all, unless they
            # are what a saved tail of its own conversation begins with
            return False
        began = time.perf_counter()
        restored = self._set_state(scratch, saved.data, 0)
        if restored:
            lib.llama_memory_seq_rm(memory, scratch, tokens, -1)
            lib.llama_memory_seq_cp(memory, scratch, sid, have, tokens)
        lib.llama_memory_seq_rm(memory, scratch, -1, -1)
        if not restored:
            return False
        slot.decoded = tokens
        self.ram.count_hit(tokens - have, round((time.perf_counter() - began) * 1000))
        return True

    def _recall_whole(self, slot: _Slot) -> None:
        """Start a sequence from a whole state saved in RAM where that gives more of its
        tokens than the KV cache did: all its cells are restored (in the room the cache has
        now: the cells no one is promised and those promised to it), then those past the
        shared tokens let go. (A sequence here shares no cells: `_tails` is False.)"""
        assert self.ram is not None
        lib, memory, sid = self._lib, self.context.memory, slot.seq_id
        hit = self.ram.match(slot.tokens, self._gives, self.ledger.free() + self.ledger.cost(sid))
        if hit is None or hit[1] <= slot.decoded:
            return
        saved, tokens = hit
        began = time.perf_counter()
        lib.llama_memory_seq_rm(memory, sid, -1, -1)
        self._checkpoints.pop(sid, None)
        slot.decoded = 0
        if not self._set_state(sid, saved.data, 0):
            lib.llama_memory_seq_rm(memory, sid, -1, -1)
            return
        held = self._held(sid)  # what was restored, not what was foreseen
        lib.llama_memory_seq_rm(memory, sid, tokens, -1)
        if not self._complete(sid, tokens, held, saved.checkpoints):
            return
        slot.decoded = tokens
        self.ram.count_hit(tokens, round((time.perf_counter() - began) * 1000))

    def _checkpoint(self, slot: _Slot) -> None:
        sid = slot.seq_id
        data = self._state(sid, _PARTIAL)
        if data is None:
            return
        taken = self._checkpoints.get(sid, [])
        point = Checkpoint(slot.decoded, data)
        self._checkpoints[sid] = kept([*taken, point], self.max_checkpoints)

    def _restore(self, seq_id: int, point: Checkpoint) -> bool:
        read = self._set_state(seq_id, point.data, _PARTIAL)
        self._restored += read
        return read

    def _find_leader(self, slot: _Slot) -> None:
        """An older running sequence whose tokens begin as this one's do, further than any
        kept prefix: this one waits for it to read them and copies its cells."""
        slot.leader, slot.shared = None, 0
        if self._private:
            return
        last = len(slot.tokens) - 1  # the last prompt token is read here: its logits
        for other in self._slots:
            if other is slot or not other.admitted or other.order > slot.order:
                continue
            shared = min(common_prefix(other.tokens, slot.tokens), last)
            if shared >= MIN_CHUNK and shared > max(slot.decoded, slot.shared):
                slot.leader, slot.shared = other, shared

    def _follow(self, slot: _Slot, stepped: set[_Slot]) -> bool:
        """Copy the leader's cells once it has read the shared tokens; True while this
        sequence still waits for them. A leader that is gone, preempted or not stepped (its
        client lags) is not waited for: this one reads its tokens itself."""
        leader = slot.leader
        if leader is None:
            return False
        if leader.seq.state is not leader or not leader.admitted or leader not in stepped:
            slot.leader = None
            return False
        if leader.decoded < slot.shared:
            return True
        if self.memory is not Memory.FULL and not whole(
            slot.shared, self._held(leader.seq_id), self.memory, self.window
        ):  # its window has slid past the shared tokens (or its recurrent state is later)
            slot.leader = None
            return False
        memory, sid = self.context.memory, slot.seq_id
        if self._linked:  # its first cells (a kept prefix's, that others may share) stay
            self._lib.llama_memory_seq_cp(memory, leader.seq_id, sid, slot.decoded, slot.shared)
        else:  # a window or recurrent state is the leader's as a whole
            self._lib.llama_memory_seq_rm(memory, sid, -1, -1)
            self._lib.llama_memory_seq_cp(memory, leader.seq_id, sid, 0, slot.shared)
        gained = slot.shared - slot.decoded
        slot.decoded, slot.leader = slot.shared, None
        self.cache.count_hit(gained)
        if self.ram is not None and self._tails():  # its own conversation's tail may begin there
            self._recall(slot)
        slot.seq.cached_tokens = max(slot.seq.cached_tokens, slot.decoded)
        return False

    def _grow(self, slot: _Slot) -> bool:
        held = self.ledger.holds(slot.seq_id)
        more = grown(held, slot.need, self.reserve_step)
        return more > held and self._reserve(slot, more)

    def _preempt(self, paused: list[_Slot]) -> None:
        """Free the youngest paused sequence's cells so the others can grow; it waits at
        the head of the line and reads its tokens again when there is room."""
        victim = max(paused, key=lambda s: s.order)
        self._preemptions += 1
        if self.ram is not None and victim.decoded:  # it reads them back from RAM
            self._save(victim.seq_id, victim.tokens[: victim.decoded])
        self._forget_cells(victim)
        self._waiting.appendleft(victim)

    # -- the step ---------------------------------------------------------------------------
    def step(self, seqs: list[Sequence]) -> list[StepResult]:
        plan = self._plan(seqs)
        while not plan.runs and plan.paused:
            self._preempt(plan.paused)
            plan = self._plan(seqs)
        if not plan.runs:
            return [PENDING] * len(seqs)
        moved = {slot for slot, _, _ in plan.runs}
        try:
            produced = self._decode(plan.runs)
        except JobError as exc:
            for slot in moved:  # what their cells hold is not to be kept or trusted
                self._forget_cells(slot)
            return [exc if seq.state in moved else PENDING for seq in seqs]
        return [produced.get(seq.state, READING if seq.state in moved else PENDING) for seq in seqs]

    def _plan(self, seqs: list[Sequence]) -> _Plan:
        plan = _Plan()
        slots: list[_Slot] = [seq.state for seq in seqs]
        # a paused sequence is waiting to grow: new ones do not take the cells it needs
        if not any(s.admitted and self._must_grow(s) for s in slots):
            self._admit()
        budget = self.n_batch
        for slot in slots:
            if slot.admitted and len(slot.tokens) - slot.decoded == 1 and budget:
                if self._must_grow(slot) and not self._grow(slot):
                    plan.paused.append(slot)
                    continue
                plan.runs.append((slot, slot.decoded, slot.decoded + 1))
                budget -= 1
        self._drafts(plan, budget)
        budget -= sum(len(slot.draft) for slot, _, _ in plan.runs)
        if plan.runs:  # others decode: read no more than keeps their step short
            budget = min(budget, self._prompt_budget())
        reading = [s for s in slots if s.admitted and len(s.tokens) - s.decoded > 1]
        stepped = set(slots)
        for slot in sorted(reading, key=lambda s: s.order):
            if self._follow(slot, stepped):
                continue
            if not budget:
                break
            image = slot.images.length_at(slot.decoded) if slot.images else 0
            if image:  # an image is read whole, as a step of its own (_decode)
                plan.runs.append((slot, slot.decoded, slot.decoded + image))
                budget -= min(budget, image)
                continue
            end = min(len(slot.tokens), slot.decoded + budget)
            later = slot.images.next_after(slot.decoded) if slot.images else None
            if later is not None:
                end = min(end, later)  # the text up to the next image
            point = last_point(slot.seq.prompt_tokens)
            if self.max_checkpoints and slot.decoded < point < end:
                end = point  # a step ends there, for the checkpoint (checkpoints.py)
            plan.runs.append((slot, slot.decoded, end))
            budget -= end - slot.decoded
        return plan

    def _drafts(self, plan: _Plan, budget: int) -> None:
        """Give the decoding sequences their n-gram drafts for this step, within the
        batch, their promised cells and their token limits; none where many decode, or
        for a sequence whose logits are shaped or reported (a grammar, logprobs)."""
        decoding = [slot for slot, _, _ in plan.runs]
        for slot in decoding:
            slot.draft = []
        if not self.speculative or len(decoding) > DRAFT_SEQUENCES:
            return
        rooms: list[tuple[_Slot, int]] = []
        for slot in decoding:
            seq = slot.seq
            if seq.constraint is not None or seq.logprobs is not None or slot.images:
                continue
            if not structured.may_draft(seq):  # a forced marker, or a budget to watch
                continue
            room = min(
                DRAFT_MOST,
                budget // len(decoding),
                self.ledger.holds(slot.seq_id) - slot.decoded - 1,
                seq.limit - seq.completion_tokens - 1,
            )
            if self.draft_length is not None:
                length = min(room, self.draft_length)
            else:
                length = best_length(slot.kept_rate, self._costs, len(decoding), room)
            if length > 0:
                rooms.append((slot, length))
        if self.drafter is not None:
            guesses = self.drafter.propose([(s.seq_id, s.tokens, room) for s, room in rooms])
            for slot, _ in rooms:
                slot.draft = guesses.get(slot.seq_id, [])
            return
        for slot, room in rooms:
            if slot.ngrams is not None:
                slot.draft = slot.ngrams.draft(slot.tokens, room)
        drafted = {slot for slot, _ in rooms}
        for slot in decoding:
            if (
                slot.ngrams is None
                or slot.seq.constraint is not None
                or slot.seq.logprobs is not None
            ):
                continue
            if slot in drafted:
                shown = slot.shadow.clear()
                if shown is not None:
                    slot.kept_rate = updated_kept(slot.kept_rate, *shown)
            elif self.draft_length is None and not slot.shadow.pending():
                # the policy said 0: keep its estimate current with a guess not decoded
                slot.shadow.start(slot.ngrams.draft(slot.tokens, DRAFT_MOST))

    def _prompt_budget(self) -> int:
        if self._per_token is None:
            return MIN_CHUNK
        return max(MIN_CHUNK, min(self.n_batch, int(self.prefill_step / self._per_token)))

    def _must_grow(self, slot: _Slot) -> bool:
        return slot.decoded + 1 > self.ledger.holds(slot.seq_id)

    def _decode(self, runs: list[tuple[_Slot, int, int]]) -> dict[_Slot, StepResult]:
        lib = self._lib
        batch = self._batch.batch
        token, pos, seq_id, n_seq_id, logits = (
            batch.token, batch.pos, batch.seq_id, batch.n_seq_id, batch.logits
        )  # fmt: skip
        n = 0
        outputs: list[tuple[_Slot, int]] = []
        for slot, first, end in runs:
            if slot.images and slot.images.length_at(first):
                assert self.projector is not None
                self.projector.read(self.ctx, slot.images, first, slot.seq_id, self.n_batch)
                continue
            tokens, sid = slot.tokens, slot.seq_id
            for p in range(first, end):
                token[n] = tokens[p]
                pos[n] = p
                n_seq_id[n] = 1
                seq_id[n][0] = sid
                logits[n] = 0
                n += 1
            if end == len(tokens):  # its last known token: sample the next from it
                logits[n - 1] = 1
                outputs.append((slot, n - 1))
                for p, guess in enumerate(slot.draft, end):  # and after each draft token
                    token[n], pos[n], n_seq_id[n], logits[n] = guess, p, 1, 1
                    seq_id[n][0] = sid
                    n += 1
        batch.n_tokens = n
        began = time.perf_counter()
        readers = [slot for slot, first, end in runs if end - first > 1]
        watch = bool(readers) and self.memory is not Memory.RECURRENT and n > 0
        if watch:
            self._watched = readers
            lib.llama_set_abort_callback(self.ctx, self._abort, None)
        try:
            status = lib.llama_decode(self.ctx, batch) if n else 0  # images alone: read
        finally:
            if watch:
                lib.llama_set_abort_callback(self.ctx, self._no_abort, None)
                self._watched = []
        if status == _ABORTED:
            # llama.cpp took the step's cells back; each sequence is where it was, and the
            # cancelled one is released next, keeping what it read before this step
            self._aborted += 1
            for slot, first, _end in runs:
                lib.llama_memory_seq_rm(self.context.memory, slot.seq_id, first, -1)
                slot.draft = []
            return {}
        if status != 0:
            raise JobError(f"llama_decode returned {status}", kind="backend_error")
        self._costs.observe(n, time.perf_counter() - began)
        if n >= MIN_CHUNK:  # a step that read prompt tokens: their cost, smoothed
            cost = (time.perf_counter() - began) / n
            self._per_token = (
                cost if self._per_token is None else 0.7 * self._per_token + 0.3 * cost
            )
        for slot, _first, end in runs:
            slot.decoded = end
            slot.seq.read = min(end, slot.seq.prompt_tokens)
            if self.max_checkpoints:
                taken = [c.tokens for c in self._checkpoints.get(slot.seq_id, ())]
                if due(end, slot.seq.prompt_tokens, taken, self.checkpoint_every):
                    self._checkpoint(slot)
        produced: dict[_Slot, StepResult] = {}
        for slot, index in outputs:
            seq = slot.seq
            logprobs = None
            if seq.constraint is not None or seq.logprobs is not None:
                logprobs = self._shape_logits(seq, index)
            if slot.draft:
                produced[slot] = self._verify(slot, index)
                continue
            if seq.forced:  # a thinking budget's end marker: chosen whatever the logits say
                chosen = seq.forced.pop(0)
                slot.sampler.accept(chosen)
            else:
                chosen = slot.sampler.sample(self.ctx, index)
            if seq.constraint is not None:
                structured.sampled(seq, chosen)
            if logprobs is not None and seq.logprobs is not None:
                seq.logprobs.append(
                    structured.logprob_entry(logprobs, chosen, seq.job.top_logprobs, self._piece_of)
                )
            slot.tokens.append(chosen)
            settled = slot.shadow.see(chosen)
            if settled is not None:
                slot.kept_rate = updated_kept(slot.kept_rate, *settled)
            produced[slot] = (
                END if lib.llama_vocab_is_eog(self.vocab, chosen) else self._text(slot, chosen)
            )
        return produced

    def _verify(self, slot: _Slot, index: int) -> StepResult:
        """Sample after the sequence's last token and after each draft token in turn,
        keeping drafts while they are what was sampled: the tokens are those decoding one
        at a time would give (the sampler draws as often, in the same order), several for
        one step when the draft was right. The cells of the drafts not kept are let go."""
        draft, start = slot.draft, slot.decoded  # start: where the first draft token lies
        texts: list[str | None] = []
        for offset in range(len(draft) + 1):
            chosen = slot.sampler.sample(self.ctx, index + offset)
            slot.tokens.append(chosen)
            if self._lib.llama_vocab_is_eog(self.vocab, chosen):
                texts.append(END)
                break
            texts.append(self._text(slot, chosen))
            if offset == len(draft) or chosen != draft[offset]:
                break
        kept = len(texts) - 1  # draft tokens whose cells hold what was sampled
        slot.decoded = start + kept
        self._lib.llama_memory_seq_rm(self.context.memory, slot.seq_id, slot.decoded, -1)
        if self.drafter is not None:
            self.drafter.kept(slot.seq_id, slot.decoded)
        self._drafted += len(draft)
        self._accepted += kept
        slot.kept_rate = updated_kept(slot.kept_rate, len(draft), kept)
        slot.draft = []
        return texts if len(texts) > 1 else texts[0]

    def _cancelled(self, _data: Any) -> bool:
        """llama.cpp's abort callback: whether a sequence the step reads for is cancelled."""
        return any(slot.seq.cancelled for slot in self._watched)

    def _shape_logits(self, seq: Sequence, index: int) -> Any:
        """Apply the sequence's grammar to the logits at a batch index, in place (the
        sampler reads them next); their log-probabilities if the request asked for them."""
        import numpy as np

        pointer = self._lib.llama_get_logits_ith(self.ctx, index)
        row = np.ctypeslib.as_array(pointer, shape=(self.vocabulary,))
        structured.constrain_numpy(seq, row)
        return structured.log_softmax(row) if seq.logprobs is not None else None

    def _piece_of(self, token: int, special: bool = False) -> bytes:
        buffer = self._piece
        n = self._lib.llama_token_to_piece(self.vocab, token, buffer, len(buffer), 0, special)
        if n < 0:  # a piece longer than the buffer: llama.cpp says how long
            buffer = ctypes.create_string_buffer(-n)
            n = self._lib.llama_token_to_piece(self.vocab, token, buffer, -n, 0, special)
        return bytes(buffer.raw[:n])

    def _text(self, slot: _Slot, chosen: int) -> str:
        text: str = slot.decoder.decode(self._piece_of(chosen, slot.seq.render_special))
        return text
