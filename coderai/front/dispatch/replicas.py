"""Which replica of a model a request goes to (a model on several engines: `replicas`).

The policy is `server.routing`:
- `cache_aware` (the default): a conversation goes where its prefix is cached. Its
  affinity (the client's own key where it sends one, else a hash of the prompt's leading
  block: front/api/affinity.py) is remembered with the replica it last went to (its home),
  and goes there again while that replica is near: it carries at most
  `server.routing_load_bound` jobs more than the least loaded one, and has a free slot if
  another has. Past that, or with no home, it goes to the least loaded near replica that
  says it holds the conversation's prefix (engines name those in their heartbeats:
  engine/holdings.py), else to the least loaded (and is remembered there). A home that
  has told of every job of the conversation sent to it, named all it holds and not this,
  has let the prefix go: the conversation goes to a near holder, and stays home where
  none holds it. A conversation with no home and no holder goes to the least loaded
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
from typing import NamedTuple

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
    #: its last heartbeat names the conversation among those it holds
    holds: bool = False
    #: how many of the JOBs sent to it that heartbeat counts (None: unknown, or it does
    #: not name all it holds of this model)
    told: int | None = None
    #: the incarnation of its engine (JOB numbers count from its HELLO)
    epoch: int = 0


class Went(NamedTuple):
    """Where a conversation's last job went: its home."""

    name: str
    epoch: int
    #: the number its JOB was sent to that engine as (EngineRecord.sending)
    sent_as: int


def choose(
    policy: Policy,
    replicas: Sequence[Replica],
    *,
    home: str | None,
    homes: Mapping[str, int],
    turn: int,
    bound: int,
    lost: bool = False,
) -> Replica:
    """The replica a request should wait for (it may have no free credit now).
    `home`: where its affinity last went, and whether it has `lost` its prefix
    (home_lost); `homes`: how many conversations each replica is home to; `turn`: the
    model's round-robin counter."""
    assert replicas, "a model with replicas routes among those serving"

    def rank(r: Replica) -> tuple[bool, int, int]:
        return r.free == 0, r.load, homes.get(r.name, 0)

    least = min(replicas, key=rank)
    if policy == "least_loaded":
        return least
    if policy == "round_robin":
        n = len(replicas)
        ring = [replicas[(turn + i) % n] for i in range(n)]
        return next((r for r in ring if r.free), ring[0])

    def near(r: Replica) -> bool:
        return r.load - least.load <= bound and (r.free > 0 or least.free == 0)

    at_home = next((r for r in replicas if r.name == home and near(r)), None)
    if at_home is not None and not lost:
        return at_home
    holders = [r for r in replicas if r.holds and near(r)]
    if holders:
        return min(holders, key=rank)
    # a home that let the prefix go is as good as any other where none holds it: staying
    # keeps a short prompt's conversation (never named) from moving at every turn
    return at_home if at_home is not None else least


def home_lost(replica: Replica, went: Went) -> bool:
    """Whether a conversation's home has let its prefix go (pure): the same incarnation
    told what it holds after taking the conversation's last job, named all it holds, and
    not this. A job it has not taken yet, or a home that does not say all, has not."""
    told = replica.told
    return (replica.epoch == went.epoch and told is not None and told >= went.sent_as
            and not replica.holds)  # fmt: skip


@dataclass
class ReplicaRouter:
    """The one owner of where each conversation went and each model's turn."""

    #: (model, affinity) -> where its last job went, least recently routed first
    _homes: OrderedDict[tuple[str, str], Went] = field(default_factory=OrderedDict)
    #: (model, replica) -> conversations it is home to
    _count: Counter[tuple[str, str]] = field(default_factory=Counter)
    _turns: Counter[str] = field(default_factory=Counter)

    def pick(
        self, policy: Policy, bound: int, model: str, affinity: str, replicas: Sequence[Replica]
    ) -> Replica:
        went = self._homes.get((model, affinity)) if affinity else None
        there = None if went is None else next((r for r in replicas if r.name == went.name), None)
        lost = there is not None and went is not None and home_lost(there, went)
        homes = {r.name: self._count[(model, r.name)] for r in replicas}
        return choose(policy, replicas, home=went.name if went else None, homes=homes,
                      turn=self._turns[model], bound=bound, lost=lost)  # fmt: skip

    def dispatched(self, model: str, affinity: str, went: Went) -> None:
        """A job of this conversation went there: its next goes there too."""
        self._turns[model] += 1
        if not affinity:
            return
        key = (model, affinity)
        before = self._homes.pop(key, None)
        if before is not None:
            self._count[(model, before.name)] -= 1
        self._homes[key] = went
        self._count[(model, went.name)] += 1
        while len(self._homes) > REMEMBERED:
            (old_model, _), old = self._homes.popitem(last=False)
            self._count[(old_model, old.name)] -= 1

    def home_of(self, model: str, affinity: str) -> str | None:
        went = self._homes.get((model, affinity))
        return None if went is None else went.name
