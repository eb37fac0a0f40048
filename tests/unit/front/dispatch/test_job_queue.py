from __future__ import annotations

from coderai.bus.messages import Job
from coderai.catalogue.entries import ModelEntry
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.queue import JobQueue


def job(job_id: int, model: str) -> FrontJob:
    entry = ModelEntry(id=model, format="fake")
    return FrontJob(job_id, entry, "fake", Job(job_id, entry.spec("fake"), "completion", "p"))


def test_arrival_order_with_requeued_jobs_first() -> None:
    queue = JobQueue()
    a, b, c = job(1, "m"), job(2, "m"), job(3, "n")
    queue.append(a)
    queue.append(b)
    queue.appendleft(c)
    assert list(queue) == [c, a, b]


def test_it_knows_which_models_have_jobs_waiting() -> None:
    queue = JobQueue()
    a, b = job(1, "m"), job(2, "m")
    queue.append(a)
    queue.append(b)
    assert queue.waiting_for("m") and not queue.waiting_for("n")
    assert queue.remove(a)
    assert queue.waiting_for("m")
    assert queue.remove(b)
    assert not queue.waiting_for("m")
    assert not queue.remove(b)  # already gone
    assert len(queue) == 0


def test_walking_a_snapshot_allows_removal() -> None:
    queue = JobQueue()
    jobs = [job(i, "m") for i in range(4)]
    for j in jobs:
        queue.append(j)
    for j in queue:
        queue.remove(j)
    assert len(queue) == 0 and not queue.waiting_for("m")


def test_clear_returns_what_was_waiting() -> None:
    queue = JobQueue()
    a = job(1, "m")
    queue.append(a)
    assert queue.clear() == [a]
    assert not queue.waiting_for("m")
