"""Which replica of a model a request goes to (a model on several engines: `replicas`).

The policy is `server.routing`:
- `cache_aware` (the default): a conversation goes where its prefix is cached. Its
  affinity (the client's own key where it sends one, else a hash of the prompt's leading
  block: front/api/affinity.py) is remembered with the replica it last went to, and goes
  there again, unless that replica carries more than `server.routing_load_bound` jobs more
  than the least loaded one, or has no free slot while another has: then it moves to the
  least loaded (and is remembered there). An affinity seen first goes to the least loaded
  replica, of those the one home to the fewest conversations, so conversations spread
  evenly before they are busy.
- `round_robin`: each replica in turn, passing over one without free credit.
- `least_loaded`: the replica with the fewest jobs.
"Least loaded" is of the replicas with a free slot where any has one (replicas may have
different slots), then by jobs.

A replica's load is the jobs the front has sent it that have not ended. The decision is a
pure function (`choose`); `ReplicaRouter` owns what it remembers.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from coderai.config import RoutingPolicy as Policy

#: conversations remembered per front (least recently routed forgotten first)
REMEMBERED = 65_536


@dataclass(frozen=True)
class Replica:
    """A serving engine of the model's replica set, as routing sees it at one moment."""

    name: str
    #: jobs sent to it and not yet ended
    load: int
    #: jobs it may still be sent (its credit)
    free: int


def choose(
    policy: Policy,
    replicas: Sequence[Replica],
    *,
    home: str | None,
    homes: Mapping[str, int],
    turn: int,
    bound: int,
) -> Replica:
    """The replica a request should wait for (it may have no free credit now).
    `home`: where its affinity last went; `homes`: how many conversations each replica is
    home to; `turn`: the model's round-robin counter."""
    assert replicas, "a model with replicas routes among those serving"
    least = min(replicas, key=lambda r: (r.free == 0, r.load, homes.get(r.name, 0)))
    if policy == "least_loaded":
        return least
    if policy == "round_robin":
        n = len(replicas)
        ring = [replicas[(turn + i) % n] for i in range(n)]
        return next((r for r in ring if r.free), ring[0])
    current = next((r for r in replicas if r.name == home), None)
    if current is None or current.load - least.load > bound or (not current.free and least.free):
        return least
    return current


@dataclass
class ReplicaRouter:
    """The one owner of where each conversation went and each model's turn."""

    #: (model, affinity) -> the replica it last went to, least recently routed first
    _homes: OrderedDict[tuple[str, str], str] = field(default_factory=OrderedDict)
    #: (model, replica) -> conversations it is home to
    _count: Counter[tuple[str, str]] = field(default_factory=Counter)
    _turns: Counter[str] = field(default_factory=Counter)

    def pick(
        self, policy: Policy, bound: int, model: str, affinity: str, replicas: Sequence[Replica]
    ) -> Replica:
        home = self._homes.get((model, affinity)) if affinity else None
        homes = {r.name: self._count[(model, r.name)] for r in replicas}
        return choose(policy, replicas, home=home, homes=homes, turn=self._turns[model],
                      bound=bound)  # fmt: skip

    def dispatched(self, model: str, affinity: str, replica: str) -> None:
        """A job of this conversation went to this replica: its next goes there too."""
        self._turns[model] += 1
        if not affinity:
            return
        key = (model, affinity)
        before = self._homes.pop(key, None)
        if before is not None:
            self._count[(model, before)] -= 1
        self._homes[key] = replica
        self._count[(model, replica)] += 1
        while len(self._homes) > REMEMBERED:
            (old_model, _), went = self._homes.popitem(last=False)
            self._count[(old_model, went)] -= 1

    def home_of(self, model: str, affinity: str) -> str | None:
        return self._homes.get((model, affinity))
