"""When idle prefix entries go to host RAM (policy.parks_idle): ahead of the prompts a step
reads, or once they are read and their first tokens out, a bounded amount a step.

Without flash attention llama.cpp computes every token a step decodes against every used
cell, idle ones too, so an idle cell costs each token read beside it about `attend`
seconds; parking it costs `save` seconds once (its state copied out). Parking ahead of a
prompt so pays where the tokens to read before the first token exceed save / attend, and
otherwise waits until those prompts are read (a lagging client's, not stepped, is not
waited for). Both are measured as the engine runs: `save`
from the parks themselves, `attend` from the cost of a prompt token (runner.per_token)
times the share of a token's arithmetic that one cell's attention is, a fact of the
model's shape (`attend_share`). Measured on an AMD EPYC with SmolLM2 (no flash attention):
a 40-token chat prompt read beside ~10k idle cells took 668 ms to its first token, 375 ms
with them parked first, and each decode step 46 ms against 11 (save ≈ 20 µs a cell,
attend ≈ 1.4 µs a token and cell: parking ahead pays from about 14 tokens on). Until a
park has been timed, parks wait for the first token.

Pure decisions and running estimates; the planner acts on them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: weight of the newest park in the running estimate of what saving a cell costs
SMOOTHING = 0.3


def attend_share(layers: int, width: int, params: int) -> float:
    """The arithmetic of one token's attention to one cell (QK and the values' weighted
    sum: 2 x width operations each, a layer) over a token's through the weights (2
    operations a parameter): the share of a prompt token's measured cost one more cell
    adds."""
    return (4 * layers * width) / (2 * params) if params > 0 else 0.0


class Parking:
    """The running estimates and the state of the parks due (the planner acts on them)."""

    def __init__(
        self,
        share: float,
        per_token: Callable[[], float | None],
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        #: attend_share of the model; 0 where unknown (then parks always wait)
        self.share = share
        #: seconds a prompt token costs, as the runner measures it (None before any)
        self._per_token = per_token
        #: what parks are timed with (a test gives its own)
        self.clock = clock
        #: seconds saving one cell to host RAM costs, smoothed (None before any park)
        self.save: float | None = None
        #: parks due: a sequence was admitted beside idle entries
        self.due = False
        #: steps whose parks waited for the prompts being read, and cells the parks saved
        self.deferred = self.parked = 0

    def per_token(self) -> float | None:
        """Seconds a prompt token costs to read, as measured (None before any)."""
        return self._per_token()

    def attend(self) -> float | None:
        """Seconds one idle cell adds to each token read beside it (None before a prompt
        token is timed, or without the model's share)."""
        per_token = self.per_token()
        return None if per_token is None or not self.share else per_token * self.share

    def start(self) -> None:
        """A sequence was admitted beside idle entries: they are to be parked."""
        self.due = True

    def wait(self) -> None:
        """A step's parks wait for the prompts it reads."""
        self.deferred += 1

    def parked_now(self, cells: int, seconds: float, more: bool) -> None:
        """A step parked `cells` (the cells its saves copied) in `seconds`; `more`: idle
        entries are left for a later step."""
        self.parked += cells
        self.due = more
        if cells <= 0 or seconds <= 0:
            return
        cost = seconds / cells
        self.save = cost if self.save is None else self.save + SMOOTHING * (cost - self.save)

    def ahead(self, to_read: int) -> bool:
        """Whether to park before `to_read` prompt tokens are read (those the sequences
        this step reads have left before their next token): where reading them beside the
        idle cells costs more than saving those."""
        attend = self.attend()
        return self.save is not None and attend is not None and to_read * attend >= self.save

    def step_bound(self, seconds: float) -> int:
        """The cells a step may park while no prompt is read: about `seconds` of saving,
        one entry at least whatever it holds (the first park, not yet timed, is one)."""
        return 1 if self.save is None else max(1, int(seconds / self.save))
