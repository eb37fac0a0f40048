"""Engines known to the front, keyed by their bus identity (name:epoch)."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from coderai.front.dispatch.placement import Candidate

if TYPE_CHECKING:
    from coderai.front.dispatch.jobs import FrontJob


#: JOBs an engine record remembers the number they were sent as (EngineRecord.sent_as):
#: more than an engine has taken and not yet told of in one heartbeat
SENT_REMEMBERED = 4096


class Offered(NamedTuple):
    """A model a node offers from its own catalogue."""

    id: str
    format: str
    alias: str | None


class RemoteEngine(NamedTuple):
    """An engine (or node) on another machine, as model placement sees it."""

    capabilities: frozenset[str]
    offered: tuple[Offered, ...]


@dataclass(eq=False)
class EngineRecord:
    identity: bytes
    name: str
    epoch: int
    pid: int
    backend: str
    capabilities: frozenset[str]
    slots: int
    gpus: list[str] = field(default_factory=list)
    #: an engine on another machine: the CURVE public key it joined with (None: local)
    remote_key: str | None = None
    #: a node's own models ({id, format, alias}), which this front lists and routes to it
    offered: tuple[Offered, ...] = ()
    #: a remote engine's or node's own slots (HELLO), which it keeps unless this front
    #: overrides them by name; None for a local engine (it takes this front's)
    own_slots: int | None = None
    last_seen: float = field(default_factory=time.monotonic)
    state: str = "ready"
    loaded: list[str] = field(default_factory=list)
    loading: dict[str, float] = field(default_factory=dict)
    rss: int = 0
    #: per model: running and waiting sequences, KV cells, prefix cache (engine counters)
    models: dict[str, dict[str, int]] = field(default_factory=dict)
    #: why it pauses to cool, as its last heartbeat said (None: it does not)
    cooldown: dict[str, Any] | None = None
    #: per card it owns, from its last heartbeat: vendor, temperature, VRAM
    gpu_readings: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: its resident models ({model, mb, busy, idle_for}) and when that heartbeat arrived;
    #: under the fleet's RAM cap, the memory its loads wait for, the room it measured
    #: (None: no cap), what its loads in flight have yet to take, and how many measures
    #: it has taken, from its last heartbeat (see room.py)
    residents: list[dict[str, Any]] = field(default_factory=list)
    residents_at: float = 0.0
    wants_mb: float = 0.0
    room_mb: float | None = None
    coming_mb: float = 0.0
    measures: int = 0
    #: models it was asked to load (CONTROL load) that no heartbeat has shown loading or
    #: loaded yet, with when it was asked: an engine that dies before its next heartbeat
    #: died loading them (deaths.asked_to_load)
    asked_to_load: dict[str, float] = field(default_factory=dict)
    #: what its backends decided about the machine (HEARTBEAT.kernels)
    kernels: dict[str, Any] = field(default_factory=dict)
    #: silent for two heartbeat intervals: PINGed, and lost if it stays silent
    missing: bool = False
    #: takes no new jobs (admin drain); its next incarnation is a new record
    draining: bool = False
    #: jobs dispatched and not yet ended by DONE/FAIL: the front's side of the credit
    jobs: dict[int, FrontJob] = field(default_factory=dict)
    #: JOBs sent to it so far, and the number each of the last SENT_REMEMBERED went as
    sent: int = 0
    sent_as: OrderedDict[int, int] = field(default_factory=OrderedDict)
    #: per model, the conversations (affinities) its last heartbeat said it holds the
    #: prefix of (HEARTBEAT.holds; a model that keeps no prefix is absent), the models it
    #: held more of than it named, and how many of the JOBs sent to it that report
    #: counts (None: not known)
    holds: dict[str, frozenset[str]] = field(default_factory=dict)
    holds_cut: frozenset[str] = frozenset()
    holds_count: int | None = None

    @property
    def free(self) -> int:
        return max(0, self.slots - len(self.jobs))

    def sending(self, job_id: int) -> int:
        """A JOB goes to it: the number it is sent as."""
        self.sent += 1
        self.sent_as[job_id] = self.sent
        while len(self.sent_as) > SENT_REMEMBERED:
            self.sent_as.popitem(last=False)
        return self.sent

    def told_holds(self, holds: dict[str, frozenset[str]], cut: frozenset[str], taken: int) -> None:
        """Its heartbeat's holds, told once it had taken JOB `taken` (0: none): the report
        counts every JOB sent to it up to that one, which the bus delivers in order."""
        self.holds, self.holds_cut = holds, cut
        self.holds_count = 0 if taken == 0 else self.sent_as.get(taken)

    def names_all(self, model: str) -> bool:
        """Whether its last heartbeat named every conversation of a model it holds."""
        return model in self.holds and model not in self.holds_cut

    def candidate(self) -> Candidate:
        return Candidate(
            self.name,
            self.capabilities,
            frozenset(self.loaded) | frozenset(self.loading),
            self.free,
            len(self.loaded),
        )


class Registry:
    def __init__(self) -> None:
        self._by_identity: dict[bytes, EngineRecord] = {}

    def add(self, record: EngineRecord) -> EngineRecord | None:
        """Register an engine; returns the previous incarnation of the same name, if any."""
        previous = self.by_name(record.name)
        if previous is not None:
            self.remove(previous)
        self._by_identity[record.identity] = record
        return previous

    def remove(self, record: EngineRecord) -> None:
        self._by_identity.pop(record.identity, None)

    def get(self, identity: bytes) -> EngineRecord | None:
        return self._by_identity.get(identity)

    def by_name(self, name: str) -> EngineRecord | None:
        for record in self._by_identity.values():
            if record.name == name:
                return record
        return None

    def all(self) -> list[EngineRecord]:
        return list(self._by_identity.values())
