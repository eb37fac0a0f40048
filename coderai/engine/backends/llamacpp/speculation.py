"""Speculative decoding in the batch: which decoding sequences get draft tokens this step
and how many (draft_policy.py decides from measured step costs), where the drafts come
from (an n-gram index of the sequence's own tokens, ngram.py, or a draft model,
draft.py), and verification: sampling after each draft token in turn, accepting drafts
while they are what was sampled. The sampler draws as often, in the same order, as
decoding one token at a time; the logits it draws from are not always the same.

Where speculation's text can differ from plain decoding's (bench/step_numerics.py): on
llama.cpp's CPU backend a step of one token and a step of several take different kernels
(one column: ggml's dot products; two or more: llamafile's tiled products, for the f16
attention and the Q8_0 output of SmolLM2; activations quantised to 8 bits carry the
difference on), so a token's logits in a verification step differ from those of the
one-token step plain decoding at one stream gives it: on SmolLM2 Q4_1 at depth 1,200, 3 of
48 positions bit-identical, up to 1.45 logits apart (0 of 48 and 1.06 with flash
attention; AMD EPYC, AVX2), while steps of 2, 3, 4 and 9 tokens give identical logits
among themselves. So at one stream the text
is plain decoding's unless a position decoded in a step of several tokens is a near-tie
(within about a logit) that the other kernel breaks the other way; which positions those
are follows the draft lengths chosen, that is what steps cost as it runs. At several
streams plain decoding's own steps hold several tokens, so both sides take the same
kernels, except in the steps where one sequence decodes alone (the others not yet
admitted, or finished). Making them equal would take one kernel for both shapes in
llama.cpp, or plain decoding paying for a second token in every step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from coderai.engine.backends.base import END, StepResult
from coderai.engine.backends.llamacpp.draft_policy import (
    StepCosts,
    best_lengths,
    updated_acceptance,
)
from coderai.engine.backends.llamacpp.llama_memory import SequenceMemory
from coderai.engine.backends.llamacpp.slot import Slot
from coderai.engine.decoding import structured

if TYPE_CHECKING:  # a name only: speculation runs (and is tested) without llama.cpp
    from coderai.engine.backends.llamacpp.draft import Drafter

#: the most draft tokens a sequence decodes in a step, and the most sequences decoding in
#: a step for drafts to be tried at all (with more, the batch already fills a step: drafts
#: would slow every sequence more than they gain)
DRAFT_MOST, DRAFT_SEQUENCES = 8, 4

#: samples a sequence's next token from the logits at a batch index, appends it to its
#: tokens, and gives it with its text (END for an end-of-generation token)
Sample = Callable[[Slot, int], tuple[int, str | None]]


class Speculation:
    def __init__(
        self,
        enabled: bool,
        drafter: Drafter | None,
        draft_length: int | None,
        memory: SequenceMemory,
    ) -> None:
        self.enabled = enabled
        #: a draft model's context, where drafts come from one (else n-grams)
        self.drafter = drafter if enabled else None
        #: a length fixed by the model entry; else chosen from what steps cost
        self.draft_length = draft_length
        self.costs = StepCosts()
        self._memory = memory
        self.drafted = self.accepted = 0

    def uses_ngrams(self, has_images: bool) -> bool:
        """Whether a new sequence gets an n-gram index: not with a draft model, and not
        with images (a draft would propose an image's placeholder ids)."""
        return self.enabled and self.drafter is None and not has_images

    def started(self, seq_id: int) -> None:
        """A sequence takes an id: what the id's last sequence left in the draft model's
        context goes."""
        if self.drafter is not None:
            self.drafter.forget(seq_id)

    def draft(
        self, decoding: list[Slot], budget: int, promised: Callable[[int], int], reading: bool
    ) -> None:
        """Give the decoding sequences their drafts for this step, within the batch's
        `budget`, their promised cells and their token limits; none where many decode, or
        for a sequence whose logits are shaped or reported (a grammar, logprobs). Lengths
        the policy chooses are chosen for the step as a whole (draft_policy.best_lengths),
        and none in a step that also reads a prompt (`reading`): a draft token there
        costs about what a prompt token does, and would put off another request's first
        token for a gain the policy cannot price (it measures decode steps only)."""
        for slot in decoding:
            slot.draft = []
        if not self.enabled or len(decoding) > DRAFT_SEQUENCES:
            return
        rooms = [self._room(slot, budget // len(decoding), promised) for slot in decoding]
        # n-gram guesses are free: made first, so that a sequence without one is not given
        # a length it cannot draft, nor chosen to try one. One with a guess keeps its room,
        # not its guess's length: the lengths are priced for the room and the guess drafted
        # up to them (measured on the echo task at one stream: 1.64x after the first token,
        # against 1.44x and 1.47x with each guess's length as its room; acceptance comes in
        # runs, which the mean rate the prices use undervalues at short guesses)
        guesses: dict[Slot, list[int]] = {}
        if reading and self.draft_length is None:
            rooms = [0] * len(decoding)  # nothing is drafted: no guess to make (shadows are)
        elif self.drafter is None:
            for i, slot in enumerate(decoding):
                index = slot.ngrams
                guesses[slot] = index.draft(slot.tokens, rooms[i]) if index is not None else []
                rooms[i] = rooms[i] if guesses[slot] else 0
        if self.draft_length is not None:
            lengths = [min(room, self.draft_length) for room in rooms]
        else:
            accepted = [slot.accept_rate for slot in decoding]
            lengths = best_lengths(accepted, rooms, self.costs)
        drafted = [(slot, length) for slot, length in zip(decoding, lengths, strict=True)
                   if length > 0]  # fmt: skip
        if self.drafter is not None:
            proposed = self.drafter.propose([(s.seq_id, s.tokens, n) for s, n in drafted])
            for slot, _ in drafted:
                slot.draft = proposed.get(slot.seq_id, [])
            return
        for slot, length in drafted:
            slot.draft = guesses[slot][:length]
        self._shadow(decoding, {slot for slot, _ in drafted})

    @staticmethod
    def _room(slot: Slot, share: int, promised: Callable[[int], int]) -> int:
        """The most draft tokens a sequence may decode this step: 0 where its logits are
        shaped or reported or its output watched, else within its share of the batch, its
        promised cells and its token limit."""
        seq = slot.seq
        if seq.constraint is not None or seq.logprobs is not None or slot.images:
            return 0
        if not structured.may_draft(seq):  # a forced marker, or a budget to watch
            return 0
        return max(0, min(
            DRAFT_MOST,
            share,
            promised(slot.seq_id) - slot.decoded - 1,
            seq.limit - seq.completion_tokens - 1,
        ))  # fmt: skip

    def _shadow(self, decoding: list[Slot], drafted: set[Slot]) -> None:
        """Where the policy gave a sequence no draft, its n-gram guess is still made and
        checked against what it samples next (draft_policy.Shadow); a guess being checked
        where a real draft is decoded now is dropped (what came true of it is counted)."""
        for slot in decoding:
            if (
                slot.ngrams is None
                or slot.seq.constraint is not None
                or slot.seq.logprobs is not None
            ):
                continue
            if slot in drafted:
                slot.shadow.clear()
            elif self.draft_length is None and not slot.shadow.pending():
                # the policy said 0: keep its estimate current with a guess not decoded
                slot.shadow.start(slot.ngrams.draft(slot.tokens, DRAFT_MOST))

    def sampled(self, slot: Slot, chosen: int) -> None:
        """A token sampled without a draft: a shadow guess checked against it."""
        settled = slot.shadow.see(chosen)
        if settled is not None:
            slot.accept_rate = updated_acceptance(slot.accept_rate, *settled)

    def verify(self, slot: Slot, index: int, sample: Sample) -> StepResult:
        """Sample after the sequence's last token (at batch `index`) and after each draft
        token in turn, accepting drafts while they are what was sampled: several tokens for
        one step when the draft was right. The cells of drafts not accepted are let go."""
        draft, start = slot.draft, slot.decoded  # start: where the first draft token lies
        texts: list[str | None] = []
        for offset in range(len(draft) + 1):
            chosen, text = sample(slot, index + offset)
            texts.append(text)
            if text is END or offset == len(draft) or chosen != draft[offset]:
                break
        taken = len(texts) - 1  # draft tokens whose cells hold what was sampled
        slot.decoded = start + taken
        self._memory.drop(slot.seq_id, slot.decoded)
        if self.drafter is not None:
            self.drafter.accepted(slot.seq_id, slot.decoded)
        self.drafted += len(draft)
        self.accepted += taken
        slot.accept_rate = updated_acceptance(slot.accept_rate, len(draft), taken)
        slot.draft = []
        return texts if len(texts) > 1 else texts[0]

    def stats(self) -> dict[str, int]:
        return {"draft_tokens": self.drafted, "draft_accepted": self.accepted}
