"""Room under the fleet's host-RAM cap (`offload.max_ram_gb`), decided once for the whole
fleet: which idle models go, on whichever engines hold them, and when to look again.

Every engine measures the same fleet and reports, in its heartbeat, the room it sees
(`room_mb`: the cap less the fleet's RSS and its own loads in flight; negative when the
fleet is over the cap) and the loads it holds back for want of room (`wants_mb`). The
front alone decides: were each engine to free the whole shortfall itself, a fleet of N
engines would unload N times what it needed to.

After asking for unloads, the keeper looks again only once each has been seen done and
every engine has since beaten twice: the first beat's measure may predate the unload,
and acting on it would unload a second model for room already made."""

from __future__ import annotations

from dataclasses import dataclass, field

from coderai.engine.eviction import ResidentView, plan_evictions
from coderai.front.registry import EngineRecord

MIB = 1 << 20


def room_evictions(engines: list[EngineRecord]) -> list[tuple[str, str]]:
    """(engine name, model) to unload, the fleet's least recently used idle models
    first, until the loads held back fit and the fleet is under its cap."""
    rooms = [e.room_mb for e in engines if e.room_mb is not None]
    if not rooms:
        return []
    needed = int(sum(e.wants_mb for e in engines) * MIB)
    # the smallest room any engine sees: each counts its own loads in flight
    free = int(min(rooms) * MIB)
    if free >= needed:
        return []
    idle = [
        # a heartbeat's idle_for dates from when it was sent: on the front's clock, the
        # model was last used at the heartbeat's arrival less it (heartbeats arrive at
        # different times, so raw idle_for values of two engines do not compare)
        ResidentView(f"{e.name}\0{r['model']}", int(r["mb"] * MIB), r["busy"],
                     e.residents_at - float(r["idle_for"]))
        for e in engines
        for r in e.residents
    ]  # fmt: skip
    return [
        (engine, model)
        for engine, model in (name.split("\0", 1) for name in plan_evictions(idle, needed, free))
    ]


@dataclass
class RoomKeeper:
    """The one owner of what has been asked and when to look again."""

    #: (engine name, model) asked to unload and not yet seen gone
    pending: set[tuple[str, str]] = field(default_factory=set)
    #: each engine's heartbeat count (by incarnation) once the last unload was seen
    #: done: looks again when every engine has beaten twice more
    settled_from: dict[tuple[bytes, int], int] | None = None

    def sweep(self, engines: list[EngineRecord]) -> list[tuple[str, str]]:
        """What to unload now (nothing while earlier unloads are still settling)."""
        by_name = {e.name: e for e in engines}
        self.pending = {
            (engine, model)
            for engine, model in self.pending
            if engine in by_name and any(r["model"] == model for r in by_name[engine].residents)
        }
        if self.pending:
            return []
        if self.settled_from is None:
            self.settled_from = {(e.identity, e.epoch): e.beats for e in engines}
        if any(e.beats < self.settled_from.get((e.identity, e.epoch), 0) + 2 for e in engines):
            return []
        asked = room_evictions(engines)
        if asked:
            self.pending = set(asked)
            self.settled_from = None
        return asked
