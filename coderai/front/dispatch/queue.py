"""Jobs waiting for an engine's credit, in fair-share order between the tenants they are
queued for (API keys, console users), each tenant's in arrival order.

Fair share is start-time fair queueing: a job is tagged, as it is queued, one turn past
the later of its tenant's last tag (while it has jobs queued) and the present, and the
queue is walked by tag. The present is the queue's virtual time (the tag of the job last
dispatched), or the tag at the head of the job's model's line where that is earlier: the
pump skips a model no engine can take now while others' jobs dispatch and move the
virtual time on, and a newcomer to that model's line is placed by its line, not behind it.

So a tenant with 64 jobs queued holds tags 1..64 ahead, and another's single job, queued
later, is tagged one turn past the present: it is dispatched after at most one job of
each other tenant, not after all 64. Of jobs with one tag, the one whose tenant had fewer
waiting goes first, so a tenant with nothing queued comes before the flooding one's job
of the same turn. A tenant alone in the queue is served in arrival order, as before.

A tenant's turn is 1 / its weight (an API key's `weight`, 1 by default): a key of weight 2
is tagged half a turn apart, so while both keep jobs queued it is dispatched two jobs for
each one of a key of weight 1. So a newcomer of weight w waits about 1/w turns: a key of
weight 0.1 waits behind some ten jobs of each busy key of weight 1.

A count per model answers "is a job of this model already waiting?" in constant time:
every request asks it (a newcomer must queue behind its model's earlier jobs), and with
thousands queued a scan per request would make admission quadratic.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, deque
from collections.abc import Iterator

from coderai.front.dispatch.jobs import FrontJob


def tag(virtual: float, last: float | None, turn: float = 1.0) -> float:
    """A newly queued job's tag: one turn past the later of the queue's virtual time and
    its tenant's last tag (pure)."""
    return max(virtual, last if last is not None else virtual) + turn


class JobQueue:
    def __init__(self) -> None:
        #: (tag, its tenant's jobs waiting when it came, arrival, job), kept sorted: the
        #: fair order
        self._jobs: list[tuple[float, int, int, FrontJob]] = []
        #: jobs put back at the head (dispatched, and must run elsewhere): before all
        self._head: deque[FrontJob] = deque()
        self._tags: dict[int, tuple[float, int, int]] = {}
        self._per_model: Counter[str] = Counter()
        self._per_tenant: Counter[str] = Counter()
        #: the tags queued for each model, in order
        self._model_tags: dict[str, list[float]] = {}
        #: each tenant's last tag while it has jobs queued (a tenant whose jobs all went,
        #: dispatched or cancelled, starts again at the present), and the tag of the job
        #: last dispatched
        self._last: dict[str, float] = {}
        self._virtual = 0.0
        self._arrivals = itertools.count()

    def __len__(self) -> int:
        return len(self._head) + len(self._jobs)

    def __iter__(self) -> Iterator[FrontJob]:
        """A snapshot in fair order, so callers may remove jobs while they walk it."""
        return iter([*self._head, *(item[-1] for item in self._jobs)])

    def append(self, job: FrontJob) -> None:
        line = self._model_tags.setdefault(job.entry.id, [])
        present = min(self._virtual, line[0]) if line else self._virtual
        # weights are 0.01..100 where they are set; the floor keeps a tag finite anyway
        tagged = tag(present, self._last.get(job.tenant), 1.0 / max(job.weight, 0.01))
        key = (tagged, self._per_tenant[job.tenant], next(self._arrivals))
        self._last[job.tenant] = tagged
        self._tags[id(job)] = key
        bisect.insort(self._jobs, (*key, job), key=lambda item: item[:3])
        bisect.insort(line, tagged)
        self._per_model[job.entry.id] += 1
        self._per_tenant[job.tenant] += 1

    def appendleft(self, job: FrontJob) -> None:
        """Back to the head: a job that was dispatched and must run elsewhere."""
        self._head.appendleft(job)
        self._per_model[job.entry.id] += 1

    def remove(self, job: FrontJob) -> bool:
        """Take a job out (cancelled, expired, or about to be dispatched: `dispatched`)."""
        key = self._tags.pop(id(job), None)
        if key is not None:
            i = bisect.bisect_left(self._jobs, key, key=lambda item: item[:3])
            assert self._jobs[i][-1] is job, "the fair order lost a job"
            del self._jobs[i]
            line = self._model_tags[job.entry.id]
            del line[bisect.bisect_left(line, key[0])]
            if not line:
                del self._model_tags[job.entry.id]
            self._per_tenant[job.tenant] -= 1
            if not self._per_tenant[job.tenant]:
                del self._per_tenant[job.tenant]
                del self._last[job.tenant]
        else:
            try:
                self._head.remove(job)
            except ValueError:
                return False
        self._per_model[job.entry.id] -= 1
        if not self._per_model[job.entry.id]:
            del self._per_model[job.entry.id]
        return True

    def dispatched(self, job: FrontJob) -> bool:
        """Take out a job that goes to an engine now: the queue's virtual time moves to
        its tag (the present, for the tags of jobs queued after)."""
        key = self._tags.get(id(job))
        if not self.remove(job):
            return False
        if key is not None:
            self._virtual = max(self._virtual, key[0])
        return True

    def waiting_for(self, model_id: str) -> bool:
        return model_id in self._per_model

    def clear(self) -> list[FrontJob]:
        jobs = list(self)
        self._jobs.clear()
        self._head.clear()
        self._tags.clear()
        self._per_model.clear()
        self._per_tenant.clear()
        self._model_tags.clear()
        self._last.clear()
        return jobs
