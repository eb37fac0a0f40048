"""Which prefix of a sequence's cells a new prompt may start from, on any kind of model.

Sharing a kept prefix copies (shares) its KV cells. On a model whose every layer attends
to the whole context that is always right. Two kinds of state cannot be cut back that way:

- a sliding-window layer keeps only the cells its window can still see: llama.cpp reuses a
  cell once it has slid out of its sequence's window, so a sequence holds positions
  [first, last] only (`llama_memory_seq_pos_min`), and a prefix of n tokens is whole only
  if the window before n is among them;
- a recurrent layer (Mamba, the hybrids' linear attention) holds one state, after the
  sequence's last token: a prefix is whole only if it is the whole sequence.

Where the held state does not cover a prefix, a checkpoint may: the window or recurrent
state saved while the sequence was read (`llama_state_seq_get_data_ext` with the partial
flag), restored into the new sequence after its full-attention cells are shared. Where
neither covers it, the new prompt is read cold: never an answer that differs from cold.

Pure decisions; the backend reads positions from llama.cpp and moves the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Memory(Enum):
    """What a model's layers hold beyond full-attention cells."""

    FULL = "full"  # every cell of every position, for every layer
    WINDOW = "window"  # some layers keep only a sliding window
    RECURRENT = "recurrent"  # some layers keep one state, after the last token


@dataclass(frozen=True)
class Held:
    """The positions a sequence holds whole: [first, end) (first > 0 only where a window
    has slid)."""

    first: int
    end: int


@dataclass(frozen=True)
class Checkpoint:
    """The partial state (window cells or recurrent state) after `tokens` tokens."""

    tokens: int
    data: bytes | bytearray  #: bytearray as the engine writes it (read in place)


def whole(n: int, held: Held, memory: Memory, window: int) -> bool:
    """Whether the first n tokens' state can be taken from what a sequence holds."""
    if n <= 0 or n > held.end:
        return n == 0
    if memory is Memory.RECURRENT:
        return n == held.end
    if memory is Memory.WINDOW and held.first > 0:
        # reading position n attends positions n - window + 1 .. n; one spare for safety
        return held.first <= n - window
    return True


def reusable(
    common: int, held: Held, memory: Memory, window: int, checkpoints: list[int]
) -> tuple[int, int | None]:
    """How many of the `common` tokens a prompt shares with a sequence it may start from,
    and the checkpoint (its token count) to restore for that, None if the held state
    serves. (0, None) when nothing may be reused."""
    if whole(common, held, memory, window):
        return common, None
    best = max((c for c in checkpoints if 0 < c <= common), default=0)
    return (best, best) if best else (0, None)


def last_point(prompt: int) -> int:
    """Where a prompt's last checkpoint falls: before its last token. The same prompt
    resent starts there (its last token is read again for its logits), and so does the
    next turn of a conversation, which begins with it (the answer after it is usually
    written again otherwise: a template drops its reasoning, a tokenizer merges across)."""
    return prompt - 1


def due(tokens: int, prompt: int, taken: list[int], every: int) -> bool:
    """Whether to checkpoint a sequence that has just read its first `tokens` tokens: at
    its prompt's last point, and every `every` tokens while it reads (a prompt that
    changes earlier, such as an edited system prompt, still reuses most)."""
    end = last_point(prompt)
    if tokens <= 0 or tokens > end or (taken and taken[-1] >= tokens):
        return False
    return tokens == end or tokens - (taken[-1] if taken else 0) >= every


def latest(checkpoints: list[Checkpoint], most: int) -> list[Checkpoint]:
    """The checkpoints a sequence keeps: the latest `most` (a conversation grows at its
    end, so the latest serve the most turns)."""
    return checkpoints[-most:] if most > 0 else []
