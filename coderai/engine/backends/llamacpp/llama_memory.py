"""The one module that calls llama.cpp's per-sequence memory and state functions
(`llama_memory_seq_*`, `llama_state_seq_*_ext`). The cache manager, the host tier, the
planner and speculation ask `SequenceMemory` for what they need, so each is tested with a
stand-in that keeps positions in Python (tests/support/cells.py), and this file is the
whole of what must be read against llama.cpp's header.

Positions follow llama.cpp: [first, end) with end -1 meaning "to the last", first -1 "from
the first".
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

from coderai.engine.backends.llamacpp.checkpoints import Held, Memory

#: llama_state_seq_*_ext flags: a sequence's whole state, or only the part that cannot be
#: cut back to a prefix (window cells, recurrent state: checkpoints.py)
WHOLE, PARTIAL = 0, 1


def layers(lib: Any, model: Any) -> tuple[Memory, int]:
    """What a model's layers hold beyond full-attention cells, and its sliding window in
    tokens (0: none)."""
    window = int(lib.llama_model_n_swa(model))
    if lib.llama_model_is_recurrent(model) or lib.llama_model_is_hybrid(model):
        return Memory.RECURRENT, window
    return (Memory.WINDOW if window > 0 else Memory.FULL), window


class SequenceMemory(Protocol):
    """A context's cells by sequence id, and the bytes of a sequence's state."""

    def drop(self, seq_id: int, first: int = -1) -> None:
        """Free a sequence's cells from position `first` on (all of them with -1);
        cells another sequence shares stay, held by that one."""

    def copy(self, source: int, target: int, first: int, end: int) -> None:
        """Give `target` the cells `source` holds for positions [first, end) (end -1: all
        past first): in a unified cache the cells are shared, nothing is copied."""

    def held(self, seq_id: int) -> Held:
        """The positions a sequence's cells hold whole."""
        ...

    def read_state(self, seq_id: int, flags: int, most: int | None = None) -> bytearray | None:
        """A sequence's state as bytes; None if it is empty or over `most` bytes."""
        ...

    def write_state(self, seq_id: int, data: bytes | bytearray, flags: int) -> bool:
        """Load bytes `read_state` wrote into a sequence; False if llama.cpp refused them."""
        ...


class LlamaMemory:
    """`SequenceMemory` over one llama.cpp context."""

    def __init__(self, lib: Any, ctx: Any, memory: Any) -> None:
        self._lib, self._ctx, self._memory = lib, ctx, memory

    def drop(self, seq_id: int, first: int = -1) -> None:
        self._lib.llama_memory_seq_rm(self._memory, seq_id, first, -1)

    def copy(self, source: int, target: int, first: int, end: int) -> None:
        self._lib.llama_memory_seq_cp(self._memory, source, target, first, end)

    def held(self, seq_id: int) -> Held:
        last = int(self._lib.llama_memory_seq_pos_max(self._memory, seq_id))
        first = int(self._lib.llama_memory_seq_pos_min(self._memory, seq_id))
        return Held(max(first, 0), last + 1)

    def read_state(self, seq_id: int, flags: int, most: int | None = None) -> bytearray | None:
        # written straight into the memory that keeps it: a copy more, or a zeroed buffer
        # more, costs ~0.4 s a copy for the ~400 MB of a 17k-token SmolLM2 sequence
        lib = self._lib
        size = int(lib.llama_state_seq_get_size_ext(self._ctx, seq_id, flags))
        if size <= 0 or (most is not None and size > most):
            return None
        data = bytearray(size)
        view = (ctypes.c_uint8 * size).from_buffer(data)
        written = int(lib.llama_state_seq_get_data_ext(self._ctx, view, size, seq_id, flags))
        del view  # its export of `data` ends here, so `data` may shrink
        if written <= 0:
            return None
        del data[written:]
        return data

    def write_state(self, seq_id: int, data: bytes | bytearray, flags: int) -> bool:
        size = len(data)
        array = ctypes.c_uint8 * size
        buffer = (
            array.from_buffer(data) if isinstance(data, bytearray) else array.from_buffer_copy(data)
        )
        loaded = self._lib.llama_state_seq_set_data_ext(self._ctx, buffer, size, seq_id, flags)
        return int(loaded) > 0
