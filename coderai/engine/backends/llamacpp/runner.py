"""Runs a step the planner made: fills llama.cpp's batch with each run's tokens, decodes it
(with the abort callback on while prompts are read, so a cancelled prompt stops the step
within a graph node), moves each sequence's position on, takes the checkpoints due, and
samples the next token of each sequence whose run reached its last known token."""

from __future__ import annotations

import time
from typing import Any

from coderai.engine.backends.base import END, Sequence, StepResult
from coderai.engine.backends.llamacpp.cache_manager import CacheManager
from coderai.engine.backends.llamacpp.checkpoints import Memory
from coderai.engine.backends.llamacpp.settings import MIN_CHUNK
from coderai.engine.backends.llamacpp.slot import Run, Slot
from coderai.engine.backends.llamacpp.speculation import Speculation
from coderai.engine.backends.llamacpp.text import Text
from coderai.engine.backends.llamacpp.vision import Projector
from coderai.engine.decoding import structured
from coderai.errors import JobError

#: what llama_decode returns when its abort callback said stop
_ABORTED = 2


class Runner:
    def __init__(
        self,
        lib: Any,
        ctx: Any,
        *,
        text: Text,
        cache: CacheManager,
        speculation: Speculation,
        projector: Projector | None,
    ) -> None:
        from llama_cpp._internals import LlamaBatch

        self._lib, self.ctx = lib, ctx
        # llama.cpp caps the batch at the context: the tokens one step may decode
        self.n_batch = int(lib.llama_n_batch(ctx))
        self._batch = LlamaBatch(n_tokens=self.n_batch, embd=0, n_seq_max=1, verbose=False)
        self.text, self.cache, self.speculation = text, cache, speculation
        self.projector = projector
        #: sequences whose prompt the running step reads: a CANCEL for one of them stops
        #: the step within a graph node (llama.cpp's abort callback, set for such steps
        #: only: it is called from every node). A recurrent state half-advanced by an
        #: aborted step could not be taken back, so those models finish their step.
        self._watched: list[Slot] = []
        self._abort = lib.ggml_abort_callback(self._cancelled)
        self._no_abort = lib.ggml_abort_callback()
        self.aborted = 0
        #: seconds a step takes per token it decodes, measured on steps that read prompts
        self.per_token: float | None = None

    def prompt_budget(self, prefill_step: float) -> int:
        """The prompt tokens a step may read while others decode: about `prefill_step`
        seconds' worth at the measured cost of a token."""
        if self.per_token is None:
            return MIN_CHUNK
        return max(MIN_CHUNK, min(self.n_batch, int(prefill_step / self.per_token)))

    def run(self, runs: list[Run]) -> dict[Slot, StepResult]:
        """Decode one step; what each sequence that sampled gives. Empty where the step
        was aborted (llama.cpp took its cells back: each sequence is where it was, and the
        cancelled one is released next, keeping what it read before this step)."""
        began = time.perf_counter()
        n, outputs = self._fill(runs)
        status = self._decode(runs, n)
        if status == _ABORTED:
            self.aborted += 1
            for run in runs:
                self.cache.memory.drop(run.slot.seq_id, run.first)
                run.slot.draft = []
            return {}
        if status != 0:
            raise JobError(f"llama_decode returned {status}", kind="backend_error")
        seconds = time.perf_counter() - began
        if n >= MIN_CHUNK:  # a step that read prompt tokens: their cost, smoothed
            cost = seconds / n
            self.per_token = cost if self.per_token is None else 0.7 * self.per_token + 0.3 * cost
        for slot, _first, end in runs:
            slot.decoded = end
            slot.seq.read = min(end, slot.seq.prompt_tokens)
            if self.cache.checkpoint_due(slot.seq_id, end, slot.seq.prompt_tokens):
                self.cache.checkpoint(slot.seq_id, end)
        produced = {slot: self._next(slot, index) for slot, index in outputs}
        if all(run.end - run.first == 1 for run in runs):
            # a decode step, priced as drafts are: its decoding and its sampling (each draft
            # token sampled is part of what it costs); a step that reads a prompt samples once
            # for many tokens and says nothing of one that verifies drafts
            self.speculation.costs.observe(n, time.perf_counter() - began)
        return produced

    def _fill(self, runs: list[Run]) -> tuple[int, list[tuple[Slot, int]]]:
        """Put the runs' tokens in the batch (an image is read by the projector instead);
        the tokens in it, and the sequences to sample with their last token's index."""
        batch = self._batch.batch
        token, pos, seq_id, n_seq_id, logits = (
            batch.token, batch.pos, batch.seq_id, batch.n_seq_id, batch.logits
        )  # fmt: skip
        n = 0
        outputs: list[tuple[Slot, int]] = []
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
        return n, outputs

    def _decode(self, runs: list[Run], n: int) -> int:
        lib = self._lib
        readers = [run.slot for run in runs if run.end - run.first > 1]
        watch = bool(readers) and self.cache.policy.memory is not Memory.RECURRENT and n > 0
        if watch:
            self._watched = readers
            lib.llama_set_abort_callback(self.ctx, self._abort, None)
        try:
            return int(lib.llama_decode(self.ctx, self._batch.batch)) if n else 0  # images: read
        finally:
            if watch:
                lib.llama_set_abort_callback(self.ctx, self._no_abort, None)
                self._watched = []

    def _cancelled(self, _data: Any) -> bool:
        """llama.cpp's abort callback: whether a sequence the step reads for is cancelled."""
        return any(slot.seq.cancelled for slot in self._watched)

    def _next(self, slot: Slot, index: int) -> StepResult:
        """A sequence's next token from the logits at a batch index (and after its draft
        tokens, where it has some: speculation.py)."""
        seq = slot.seq
        logprobs = None
        if seq.constraint is not None or seq.logprobs is not None:
            logprobs = self._shape_logits(seq, index)
        if slot.draft:
            return self.speculation.verify(slot, index, self._draw)
        if seq.forced:  # a thinking budget's end marker: chosen whatever the logits say
            chosen = seq.forced.pop(0)
            slot.sampler.accept(chosen)
        else:
            chosen = slot.sampler.sample(self.ctx, index)
        if seq.constraint is not None:
            structured.sampled(seq, chosen)
        if logprobs is not None and seq.logprobs is not None:
            seq.logprobs.append(
                structured.logprob_entry(logprobs, chosen, seq.job.top_logprobs, self.text.piece)
            )
        slot.tokens.append(chosen)
        self.speculation.sampled(slot, chosen)
        return self._text_of(slot, chosen)

    def _draw(self, slot: Slot, index: int) -> tuple[int, str | None]:
        """Sample at a batch index, as verification does after each draft token."""
        chosen = slot.sampler.sample(self.ctx, index)
        slot.tokens.append(chosen)
        return chosen, self._text_of(slot, chosen)

    def _text_of(self, slot: Slot, chosen: int) -> str | None:
        if self.text.is_end(chosen):
            return END
        return self.text.piece_text(slot.decoder, chosen, slot.seq.render_special)

    def _shape_logits(self, seq: Sequence, index: int) -> Any:
        """Apply the sequence's grammar to the logits at a batch index, in place (the
        sampler reads them next); their log-probabilities if the request asked for them."""
        import numpy as np

        pointer = self._lib.llama_get_logits_ith(self.ctx, index)
        row = np.ctypeslib.as_array(pointer, shape=(self.text.vocabulary,))
        structured.constrain_numpy(seq, row)
        return structured.log_softmax(row) if seq.logprobs is not None else None
