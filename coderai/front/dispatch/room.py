"""Room under the fleet's host-RAM cap (`offload.max_ram_gb`), decided once for the whole
fleet: which idle models go, on whichever engines hold them, and when to look again.

Every engine measures the same fleet and reports, in its heartbeat, the room under the cap
at that measure (`room_mb`: negative when the fleet is over it), what its own loads in
flight have yet to take (`coming_mb`), the loads it holds back for want of room
(`wants_mb`), and how many measures it has taken. The front alone decides: were each
engine to free the whole shortfall itself, a fleet of N engines would unload N times what
it needed to.

After asking for unloads, the keeper looks again only once each has been seen done (or its
engine has measured twice since: an instance that was busy stays) and every engine has
measured twice more: the first measure may predate the unload, and acting on it would
unload a second model for room already made."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from coderai.common.eviction import ResidentView, plan_evictions
from coderai.front.dispatch.registry import EngineRecord

MIB = 1 << 20

#: an engine incarnation (its identity and epoch): a restart under the same name is another
Incarnation = tuple[bytes, int]


def _incarnation(engine: EngineRecord) -> Incarnation:
    return (engine.identity, engine.epoch)


def room_evictions(
    engines: list[EngineRecord], kept: Callable[[str], bool] = lambda model: False
) -> list[tuple[EngineRecord, str]]:
    """(engine, model) to unload, the fleet's least recently used idle models first, until
    the loads held back fit and the fleet is under its cap. Loads that could not fit even
    were every idle model gone are left to their wait (it ends in a 503): emptying the
    fleet for them would serve nobody."""
    capped = [e for e in engines if e.room_mb is not None]
    if not capped:
        return []
    # the smallest room seen, less what every engine's loads have yet to take. While loads
    # are in flight, only the loading engines' rooms count: each was measured at the same
    # instant as its own `coming_mb`, whereas another engine's later measure may already
    # hold part of that load, which would then be counted twice (a spurious unload seen in
    # CI: a 300 MiB load counted once in RSS and again as still to come)
    loading = [e for e in capped if e.coming_mb > 0] or capped
    free = int((min(e.room_mb for e in loading if e.room_mb is not None)
                - sum(e.coming_mb for e in capped)) * MIB)  # fmt: skip
    needed = int(sum(e.wants_mb for e in capped) * MIB)
    views: dict[str, tuple[EngineRecord, str, ResidentView]] = {}
    for engine in capped:
        running = {job.entry.id for job in engine.jobs.values()}
        for r in engine.residents:
            key = f"{engine.name}\0{r['model']}"
            # a heartbeat's idle_for dates from when it was sent: on the front's clock, the
            # model was last used at the heartbeat's arrival less it (heartbeats arrive at
            # different times, so raw idle_for values of two engines do not compare)
            last_used = engine.residents_at - float(r["idle_for"])
            # a job may be on its way; a model kept loaded is never unloaded for room
            busy = (bool(r["busy"]) or r["model"] in running or kept(r["model"])
                    or bool(r.get("kept")))  # a head's model on a node: its spec says  # fmt: skip
            size = int(r["mb"] * MIB)
            if key in views:  # several instances of one model: one unload takes them all
                _, _, seen = views[key]
                size += seen.size
                busy = busy or seen.busy
                last_used = max(last_used, seen.last_used)
            views[key] = (engine, r["model"], ResidentView(key, size, busy, last_used))
    idle = sum(v.size for _, _, v in views.values() if not v.busy)
    if free + idle < needed:
        needed = 0  # only what brings the fleet back under its cap
    if free >= needed:
        return []
    chosen = plan_evictions([v for _, _, v in views.values()], needed, free)
    return [(views[key][0], views[key][1]) for key in chosen]


@dataclass
class RoomKeeper:
    """The one owner of what has been asked and when to look again."""

    #: (engine incarnation, model) asked to unload and not yet seen gone: the engine's
    #: measure count when asked
    pending: dict[tuple[Incarnation, str], int] = field(default_factory=dict)
    #: each engine's measure count once the last unload was seen done: looks again when
    #: every engine under the cap has measured twice more
    settled_from: dict[Incarnation, int] | None = None

    def sweep(
        self, engines: list[EngineRecord], kept: Callable[[str], bool] = lambda model: False
    ) -> list[tuple[EngineRecord, str]]:
        """What to unload now (nothing while earlier unloads are still settling)."""
        by_incarnation = {_incarnation(e): e for e in engines}
        for (who, model), asked_at in list(self.pending.items()):
            engine = by_incarnation.get(who)
            if (
                engine is None
                or all(r["model"] != model for r in engine.residents)
                or engine.measures >= asked_at + 2  # it stayed: busy, or reloaded
            ):
                del self.pending[(who, model)]
        if self.pending:
            return []
        capped = [e for e in engines if e.room_mb is not None]
        if self.settled_from is None:
            self.settled_from = {_incarnation(e): e.measures for e in capped}
        if any(e.measures < self.settled_from.get(_incarnation(e), 0) + 2 for e in capped):
            return []
        asked = room_evictions(engines, kept)
        if asked:
            self.pending = {(_incarnation(e), model): e.measures for e, model in asked}
            self.settled_from = None
        return asked
