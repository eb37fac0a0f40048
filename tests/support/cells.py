"""A stand-in for llama.cpp's sequence memory (coderai/engine/backends/llamacpp/
llama_memory.py), for unit tests of the cache manager, the host tier and the planner.

It keeps, per sequence id, the positions its cells hold, as llama.cpp's unified cache
does: a copy adds the source's positions to the target, a drop removes the target's from
a position on. A saved state is the positions as bytes (8 per position, so sizes scale as
a real state's do), and loading it gives them back. It records each call, so a test can
say what went to llama.cpp."""

from __future__ import annotations

import struct

from coderai.engine.backends.llamacpp.checkpoints import Held

#: bytes a saved position takes
POSITION_BYTES = 8


class StandInMemory:
    def __init__(self) -> None:
        self.cells: dict[int, set[int]] = {}
        self.calls: list[tuple[object, ...]] = []
        #: sequence ids whose state a load refuses (as llama.cpp may)
        self.refuse: set[int] = set()

    def drop(self, seq_id: int, first: int = -1) -> None:
        self.calls.append(("drop", seq_id, first))
        held = self.cells.get(seq_id, set())
        self.cells[seq_id] = {p for p in held if p < max(first, 0)}

    def copy(self, source: int, target: int, first: int, end: int) -> None:
        self.calls.append(("copy", source, target, first, end))
        last = end if end >= 0 else 1 << 62
        moved = {p for p in self.cells.get(source, set()) if max(first, 0) <= p < last}
        self.cells.setdefault(target, set()).update(moved)

    def held(self, seq_id: int) -> Held:
        positions = self.cells.get(seq_id)
        if not positions:
            return Held(0, 0)
        return Held(min(positions), max(positions) + 1)

    def read_state(self, seq_id: int, flags: int, most: int | None = None) -> bytearray | None:
        self.calls.append(("read_state", seq_id, flags))
        positions = sorted(self.cells.get(seq_id, set()))
        if not positions:
            return None
        data = bytearray(struct.pack(f"<{len(positions)}q", *positions))
        if most is not None and len(data) > most:
            return None
        return data

    def write_state(self, seq_id: int, data: bytes | bytearray, flags: int) -> bool:
        self.calls.append(("write_state", seq_id, flags))
        if seq_id in self.refuse:
            return False
        positions = struct.unpack(f"<{len(data) // POSITION_BYTES}q", bytes(data))
        self.cells.setdefault(seq_id, set()).update(positions)
        return True

    def tokens(self, seq_id: int) -> int:
        """How many positions a sequence holds."""
        return len(self.cells.get(seq_id, set()))
