"""The engine-host contract: what runs the engines the dispatcher talks to.

The supervisor spawns and restarts local processes; the in-process engine (one thread in
the front, --single-process) has nothing to restart; remote engines (a later issue) will be
a host that never spawns. The dispatcher is given its host when it is made and starts it
with itself as the listener, so nothing is patched in after construction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import zmq

    from coderai.front.engines.plan import EnginePlan

#: consecutive failures at start after which an engine is reported as flapping
FLAPPING_AFTER = 3


@dataclass
class EngineStatus:
    #: starting (spawned, no HELLO yet) | running | restarting | backoff | stopped
    state: str = "starting"
    failures: int = 0
    restarts: int = 0
    last_exit: int | None = None
    retry_at: float | None = None
    restart_requested: bool = False
    #: its last incarnation was killed for not joining within engine_join_timeout; until
    #: one joins, requests do not wait for it
    join_failed: bool = False
    #: the model formats it is planned to serve (a request for one names it while it is down)
    capabilities: tuple[str, ...] = ()

    @property
    def flapping(self) -> bool:
        return self.failures >= FLAPPING_AFTER


class HostListener(Protocol):
    """What a host tells the dispatcher."""

    def engine_exited(self, name: str, pid: int | None, code: int | None = None) -> None:
        """An engine's process ended (the OS sentinel), with its exit code (negative: the
        signal it died of)."""

    def answer_unservable(self) -> None:
        """An engine will not come (it failed to join): answer what only it could serve."""


class EngineHost(Protocol):
    #: whether restart() can stop and start an engine (a process the host owns)
    restartable: bool

    def start(self, listener: HostListener) -> None: ...
    async def stop(self) -> None: ...

    def joinable(self) -> set[str]:
        """Engines that requests may wait for: alive, or about to be started."""

    def names(self) -> set[str]:
        """Every engine this host runs, whatever its state: names no remote engine takes."""

    def joined(self, name: str, pid: int) -> None:
        """The engine said HELLO."""

    def kill(self, name: str, pid: int) -> None:
        """End an engine that stopped answering (it is restarted, where the host can)."""

    async def restart(self, name: str) -> None: ...

    def statuses(self) -> dict[str, EngineStatus]:
        """Restarts, back-off and flapping per engine, where the host tracks them."""


class Unhosted:
    """No engines of its own: every engine joins the bus from elsewhere (tests' peers)."""

    restartable = False

    def __init__(self, joinable: set[str] | None = None) -> None:
        self._joinable = joinable if joinable is not None else set()

    def start(self, listener: HostListener) -> None:
        pass

    async def stop(self) -> None:
        pass

    def joinable(self) -> set[str]:
        return self._joinable

    def names(self) -> set[str]:
        return self._joinable

    def joined(self, name: str, pid: int) -> None:
        pass

    def kill(self, name: str, pid: int) -> None:
        pass

    async def restart(self, name: str) -> None:
        pass

    def statuses(self) -> dict[str, EngineStatus]:
        return {}


#: --single-process: makes the one engine that runs on a thread of the front's process,
#: from its plan, the front's ZeroMQ context and the bus token; gives the bus endpoint it
#: joins and its host (coderai.cli.inprocess; the command passes it in)
InProcess = Callable[["EnginePlan", "zmq.Context[zmq.Socket[bytes]]", str], tuple[str, EngineHost]]
