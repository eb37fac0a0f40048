"""A draft model for speculative decoding: a small model with the same vocabulary guesses
the next few tokens of each decoding sequence, which the main model then checks in one
batched step (speculation.py accepts those its sampler would have picked).

The draft model has a context of its own, with a sequence per main sequence id. Before
guessing it reads what it has not seen of the sequence (the prompt once, then the tokens
accepted since), a bounded number of tokens a step so that a long prompt never stalls the
main model's steps; a sequence still catching up gets no draft that step. Its guesses are
greedy. After the main model's check, the draft context lets go of the guesses that were
not accepted, so it again holds exactly a prefix of the sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from coderai.engine.backends.llamacpp.llama_memory import LlamaMemory
from coderai.errors import JobError

#: tokens of catch-up (prompts it has not read) the draft context reads in one step
CATCH_UP = 512
#: token ids compared to decide that two vocabularies are the same
_SAMPLED_IDS = 512


class Drafter:
    def __init__(self, path: Path, main_model: Any, params: Any) -> None:
        import llama_cpp
        from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel

        self._lib: Any = llama_cpp
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = 0 if not llama_cpp.llama_supports_gpu_offload() else -1
        try:
            self.model = LlamaModel(path_model=str(path), params=model_params, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise JobError(
                f"llama.cpp cannot load draft model file {path}: {exc}", kind="model_file"
            ) from None
        if not same_vocabulary(main_model, self.model):
            raise JobError(
                f"draft model {path.name} has another vocabulary than the model it drafts"
                " for: its guesses would be other tokens",
                kind="bad_model",
            )
        self.context = LlamaContext(model=self.model, params=params, verbose=False)
        self.ctx = self.context.ctx
        self._memory = LlamaMemory(llama_cpp, self.ctx, self.context.memory)
        self.vocabulary = int(self.model.n_vocab())
        self.n_batch = int(llama_cpp.llama_n_batch(self.ctx))
        self._batch = LlamaBatch(n_tokens=self.n_batch, embd=0, n_seq_max=1, verbose=False)
        #: tokens of each sequence (by id) the draft context holds
        self._held: dict[int, int] = {}

    def forget(self, seq_id: int) -> None:
        """A sequence id is released or reused: its draft cells go."""
        self._memory.drop(seq_id)
        self._held.pop(seq_id, None)

    def propose(self, wants: list[tuple[int, list[int], int]]) -> dict[int, list[int]]:
        """Greedy guesses for sequences (id, tokens, most guesses): those that catch up
        within this step's budget get up to `most` tokens each."""
        budget = min(CATCH_UP, self.n_batch - len(wants))  # a token each for the others
        ready: list[tuple[int, list[int], int]] = []
        reads: list[tuple[int, list[int], int, int]] = []  # id, tokens, first, end
        for seq_id, tokens, most in wants:
            held = self._held.get(seq_id, 0)
            behind = len(tokens) - held
            if behind < 1 or most < 1:
                continue
            if behind > budget:  # reads part of it now, guesses in a later step
                reads.append((seq_id, tokens, held, held + budget))
                budget = 0
                continue
            budget -= behind
            reads.append((seq_id, tokens, held, len(tokens)))
            ready.append((seq_id, tokens, most))
        guesses: dict[int, list[int]] = {seq_id: [] for seq_id, _, _ in ready}
        rows = self._decode([(s, t[a:e], a, e == len(t)) for s, t, a, e in reads if e > a])
        for seq_id, row in rows.items():
            guesses[seq_id].append(row)
        # one more guess per step for each sequence still wanting one
        for round_ in range(1, max((m for _, _, m in ready), default=0)):
            going = [(s, t) for s, t, m in ready if round_ < m and guesses[s]]
            if not going:
                break
            batch = []
            for seq_id, tokens in going:
                position = len(tokens) + round_ - 1
                batch.append((seq_id, [guesses[seq_id][-1]], position, True))
            for seq_id, row in self._decode(batch).items():
                guesses[seq_id].append(row)
        return guesses

    def accepted(self, seq_id: int, tokens: int) -> None:
        """The main model accepted a prefix of the guesses: the sequence's first `tokens`
        tokens are now right in the draft context, the guesses after them go."""
        if self._held.get(seq_id, 0) > tokens:
            self._memory.drop(seq_id, tokens)
        self._held[seq_id] = min(self._held.get(seq_id, 0), tokens)

    def _decode(self, runs: list[tuple[int, list[int], int, bool]]) -> dict[int, int]:
        """Decode runs (id, tokens, first position, guess after them) in one batch; the
        greedy next token after each run that asks for one."""
        import numpy as np

        if not runs:
            return {}
        lib, batch = self._lib, self._batch.batch
        n = 0
        outputs: list[tuple[int, int]] = []
        for seq_id, tokens, first, guess in runs:
            for i, token in enumerate(tokens):
                batch.token[n], batch.pos[n], batch.n_seq_id[n] = token, first + i, 1
                batch.seq_id[n][0], batch.logits[n] = seq_id, 0
                n += 1
            if guess:
                batch.logits[n - 1] = 1
                outputs.append((seq_id, n - 1))
            self._held[seq_id] = first + len(tokens)
        batch.n_tokens = n
        if lib.llama_decode(self.ctx, batch) != 0:
            raise JobError("the draft model's llama_decode failed", kind="backend_error")
        found: dict[int, int] = {}
        for seq_id, index in outputs:
            logits = np.ctypeslib.as_array(
                lib.llama_get_logits_ith(self.ctx, index), shape=(self.vocabulary,)
            )
            found[seq_id] = int(logits.argmax())
        return found


def same_vocabulary(a: Any, b: Any, sampled: int = _SAMPLED_IDS) -> bool:
    """Whether two llama.cpp models tokenise alike: the same size, special tokens and, for
    ids spread over the vocabulary, the same pieces."""
    size = int(a.n_vocab())
    if size != int(b.n_vocab()) or a.token_bos() != b.token_bos() or a.token_eos() != b.token_eos():
        return False
    piece: Callable[[Any, int], Any] = lambda m, i: m.token_get_text(i)  # noqa: E731
    step = max(1, size // sampled)
    return all(piece(a, i) == piece(b, i) for i in range(0, size, step))
