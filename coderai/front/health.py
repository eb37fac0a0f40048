"""Readiness of each engine and of the whole server, from the front's own records."""

from __future__ import annotations

from typing import Any

from coderai.front.registry import EngineRecord
from coderai.front.supervisor import EngineStatus

#: engine states in which an engine takes requests (a loading engine serves its other models)
SERVING = frozenset({"ready", "loading"})


def engine_state(record: EngineRecord | None, draining: bool, status: EngineStatus | None) -> str:
    """ready | loading | cooling | draining, for an engine on the bus; starting |
    restarting | backoff | dead for one that is not."""
    if record is not None:
        if draining:
            return "draining"
        return "cooling" if record.cooldown else record.state
    if status is None or status.state == "stopped":
        return "dead"
    if status.state == "backoff":
        return "backoff"
    return "restarting" if status.restarts else "starting"


def health_report(
    names: list[str],
    records: dict[str, EngineRecord],
    draining: set[str],
    statuses: dict[str, EngineStatus],
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body): 200 while at least one engine serves, else 503."""
    engines = []
    for name in names:
        record = records.get(name)
        status = statuses.get(name)
        item: dict[str, Any] = record.describe() if record is not None else {"name": name}
        item["state"] = engine_state(record, name in draining, status)
        if status is not None:
            item["restarts"] = status.restarts
            item["flapping"] = status.flapping
        engines.append(item)
    up = any(e["state"] in SERVING for e in engines)
    return (200 if up else 503), {"status": "ok" if up else "unavailable", "engines": engines}
