"""Which conversations an engine holds the prefix of, for the front's cache-aware routing
between a model's replicas (front/dispatch/replicas.py).

A job of a model with replicas carries its affinity (front/api/affinity.py: the client's
own key, else a hash of the prompt's leading block). A backend that keeps prefixes sets
each sequence's lead as it starts: a fingerprint of its prompt's first LEAD tokens, which
an agent's every turn begins with (the system prompt and tools). The scheduler notes the
affinity with that lead, per model (so the notes outlive an instance that is unloaded and
loaded again, whose disk cache still holds what it held), and the heartbeat names the
affinities whose lead begins a prefix one of the model's caches still keeps (the KV
cache, host RAM, disk), most recently seen first, so that the front can prefer a replica
that really holds a conversation's prefix: after a front restarts and has forgotten where
each went, when a replica let the prefix go, or when the load guard moves a conversation.

An affinity keeps its last few leads: one client key may cover several prompts (an agent's
main conversation, its subagents, the short title call), and it is held while any is. A
prompt shorter than LEAD tokens is not noted: reading it again costs little.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from coderai.bus.checker import MAX_AFFINITY

#: tokens a lead covers
LEAD = 256
#: affinities noted per model (least recently seen forgotten first)
NOTED = 4096
#: leads kept per affinity (the most recent)
LEADS = 4
#: affinities one heartbeat names per model (the front bounds it too: bus/checker.py)
REPORTED = 256


def lead_of(tokens: Sequence[int]) -> int | None:
    """The fingerprint of a prompt's first LEAD tokens; None for a shorter one (pure).
    Python's hash of a tuple of ints is the same in every process and run."""
    if len(tokens) < LEAD:
        return None
    return hash(tuple(tokens[:LEAD]))


def leads_of(held: Iterable[Sequence[int]]) -> set[int]:
    """The leads of token sequences a cache holds from their first token (pure)."""
    return {lead for tokens in held if (lead := lead_of(tokens)) is not None}


class Report(NamedTuple):
    """What one model holds, as a heartbeat says it."""

    #: affinities, most recently seen first
    names: list[str]
    #: more were held than a heartbeat names: one not named may be held all the same
    cut: bool


class Holdings:
    """One model's noted affinities, owned by the scheduler thread."""

    def __init__(self, noted: int = NOTED) -> None:
        self._leads: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._most = noted

    def note(self, affinity: str, lead: int | None) -> None:
        """A sequence of this conversation started with a prompt of this lead."""
        if lead is None or not 0 < len(affinity) <= MAX_AFFINITY:
            return
        kept = self._leads.pop(affinity, ())
        self._leads[affinity] = (lead, *(k for k in kept if k != lead))[:LEADS]
        while len(self._leads) > self._most:
            self._leads.popitem(last=False)

    def held(self, present: set[int], first: Sequence[str] = (), most: int = REPORTED) -> Report:
        """`first` (the conversations running), then the affinities with a lead that is
        `present`, most recently seen first (pure)."""
        out = dict.fromkeys(a for a in first if 0 < len(a) <= MAX_AFFINITY)
        for affinity, leads in reversed(self._leads.items()):
            if len(out) > most:
                break
            if affinity not in out and any(lead in present for lead in leads):
                out[affinity] = None
        names = list(out)
        return Report(names[:most], len(names) > most)
