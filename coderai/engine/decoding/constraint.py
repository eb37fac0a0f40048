"""A grammar applied to one sequence's logits: the tokens it forbids get -inf before the
sampler runs, and each sampled token is fed back so the next mask follows it.

The mask is llguidance's bitmask (one bit per token), unpacked once per step into a
boolean row; a row of logits wider than the tokenizer's vocabulary (padded output layers)
has its extra columns forbidden too.
"""

from __future__ import annotations

import logging
from typing import Any

from coderai.errors import JobError

log = logging.getLogger("coderai.engine")


class Constraint:
    def __init__(self, tokenizer: Any, grammar: str) -> None:
        import llguidance
        import numpy as np

        self._np = np
        self.matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if self.matcher.is_error():
            problem = self.matcher.get_error()
            raise JobError(f"the grammar cannot be used: {problem}", kind="bad_request")
        self.vocabulary = int(tokenizer.vocab_size)
        self._bits = np.full(((self.vocabulary + 31) // 32,), -1, dtype=np.int32)
        self.tokenizer = tokenizer

    @property
    def done(self) -> bool:
        """The grammar is complete: nothing more may be generated under it."""
        return bool(self.matcher.is_stopped())

    @property
    def accepting(self) -> bool:
        return bool(self.matcher.is_accepting())

    def allowed(self) -> Any:
        """A boolean row: which token ids the grammar allows next."""
        np = self._np
        self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
        return bits[: self.vocabulary].astype(bool)

    def mask_numpy(self, logits: Any) -> None:
        """Forbid, in place, the tokens the grammar does not allow (a float32 numpy row)."""
        allowed = self.allowed()
        logits[: self.vocabulary][~allowed] = -float("inf")
        logits[self.vocabulary :] = -float("inf")

    def mask_torch(self, logits: Any) -> None:
        """The same for a torch row."""
        import torch

        allowed = torch.from_numpy(self.allowed())
        logits[: self.vocabulary].masked_fill_(~allowed, float("-inf"))
        logits[self.vocabulary :] = float("-inf")

    def accept(self, token: int) -> None:
        if not self.matcher.consume_token(token):
            # only possible if a token the mask forbade was sampled: a backend bug
            log.warning("grammar refused token %d: %s", token, self.matcher.get_error())

    def accept_text(self, text: str) -> bool:
        """Feed text the model wrote before the grammar applied (a lazily constrained call's
        start); False if the grammar cannot continue from it."""
        if not text:
            return True
        tokens = self.tokenizer.tokenize_str(text)
        return bool(self.matcher.consume_tokens(tokens)) and not self.matcher.is_error()
