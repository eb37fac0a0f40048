"""Jobs waiting for an engine's credit, in arrival order.

A count per model answers "is a job of this model already waiting?" in constant time:
every request asks it (a newcomer must queue behind its model's earlier jobs), and with
thousands queued a scan per request would make admission quadratic.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator

from coderai.front.dispatch.jobs import FrontJob


class JobQueue:
    def __init__(self) -> None:
        self._jobs: deque[FrontJob] = deque()
        self._per_model: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[FrontJob]:
        """A snapshot, so callers may remove jobs while they walk it."""
        return iter(list(self._jobs))

    def append(self, job: FrontJob) -> None:
        self._jobs.append(job)
        self._per_model[job.entry.id] += 1

    def appendleft(self, job: FrontJob) -> None:
        """Back to the head: a job that was dispatched and must run elsewhere."""
        self._jobs.appendleft(job)
        self._per_model[job.entry.id] += 1

    def remove(self, job: FrontJob) -> bool:
        try:
            self._jobs.remove(job)
        except ValueError:
            return False
        self._per_model[job.entry.id] -= 1
        if not self._per_model[job.entry.id]:
            del self._per_model[job.entry.id]
        return True

    def waiting_for(self, model_id: str) -> bool:
        return model_id in self._per_model

    def clear(self) -> list[FrontJob]:
        jobs = list(self._jobs)
        self._jobs.clear()
        self._per_model.clear()
        return jobs
