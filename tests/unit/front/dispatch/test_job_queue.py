from __future__ import annotations

from coderai.bus.messages import Job
from coderai.catalogue.entries import ModelEntry
from coderai.front.dispatch.jobs import FrontJob
from coderai.front.dispatch.queue import JobQueue


def job(job_id: int, model: str, tenant: str = "") -> FrontJob:
    entry = ModelEntry(id=model, format="fake")
    message = Job(job_id, entry.spec("fake"), "completion", "p")
    return FrontJob(job_id, entry, "fake", message, tenant=tenant)


def serve(queue: JobQueue, times: int) -> list[FrontJob]:
    """Dispatch the first `times` jobs in the queue's order, as the dispatcher's pump does."""
    served = []
    for _ in range(times):
        first = next(iter(queue))
        assert queue.dispatched(first)
        served.append(first)
    return served


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


def test_a_tenant_with_many_jobs_queued_holds_another_back_by_one_turn_at_most() -> None:
    """Key A queues 12, two of them are dispatched, then key B queues one: B's is next (A's
    job of the same turn after it: B had nothing waiting), not after A's other ten."""
    queue = JobQueue()
    flood = [job(i, "m", "key:a") for i in range(12)]
    for j in flood:
        queue.append(j)
    assert serve(queue, 2) == flood[:2]
    single = job(100, "m", "key:b")
    queue.append(single)
    order = list(queue)
    assert order.index(single) == 0
    assert [j for j in order if j is not single] == flood[2:]  # A's own in arrival order


def test_tenants_take_turns_and_one_alone_keeps_arrival_order() -> None:
    queue = JobQueue()
    a = [job(i, "m", "key:a") for i in range(3)]
    b = [job(10 + i, "m", "key:b") for i in range(3)]
    for j in [*a, *b]:
        queue.append(j)
    assert serve(queue, 6) == [a[0], b[0], a[1], b[1], a[2], b[2]]
    alone = [job(20 + i, "m", "user") for i in range(4)]
    for j in alone:
        queue.append(j)
    assert list(queue) == alone


def test_a_cancelled_job_leaves_the_order_of_the_rest() -> None:
    queue = JobQueue()
    jobs = [job(i, "m", f"key:{i % 2}") for i in range(6)]
    for j in jobs:
        queue.append(j)
    before = list(queue)
    assert queue.remove(jobs[2]) and not queue.dispatched(jobs[2])
    assert list(queue) == [j for j in before if j is not jobs[2]]


def test_a_tenant_whose_jobs_went_starts_again_at_the_present() -> None:
    """Key A's 50 queued jobs are cancelled (its client went away): its next job is not
    tagged behind them, after 50 turns of everyone else."""
    queue = JobQueue()
    gone = [job(i, "m", "key:a") for i in range(50)]
    for j in gone:
        queue.append(j)
    for j in gone:
        assert queue.remove(j)
    others = [job(100 + i, "m", "key:b") for i in range(5)]
    for j in others:
        queue.append(j)
    again = job(200, "m", "key:a")
    queue.append(again)
    assert list(queue).index(again) <= 1


def test_a_newcomer_to_a_model_no_engine_takes_now_is_placed_by_that_models_line() -> None:
    """Key A floods model x, which no engine can take; key B's jobs on model y dispatch
    meanwhile and move the queue's virtual time on. Key C's job on x is one turn behind
    the head of x's line, not behind all of A's."""
    queue = JobQueue()
    flood = [job(i, "x", "key:a") for i in range(10)]
    for j in flood:
        queue.append(j)
    for i in range(20):
        other = job(100 + i, "y", "key:b")
        queue.append(other)
        assert queue.dispatched(other)
    late = job(200, "x", "key:c")
    queue.append(late)
    assert [j for j in queue if j.entry.id == "x"].index(late) <= 1


def test_a_tenant_of_weight_two_is_dispatched_twice_as_often_while_both_wait() -> None:
    queue = JobQueue()
    heavy = [job(i, "m", "key:heavy") for i in range(20)]
    light = [job(100 + i, "m", "key:light") for i in range(20)]
    for j in heavy:
        j.weight = 2.0
    for a, b in zip(heavy, light, strict=True):
        queue.append(a)
        queue.append(b)
    served = serve(queue, 15)
    assert sum(j.tenant == "key:heavy" for j in served) == 10
    assert sum(j.tenant == "key:light" for j in served) == 5
    # each tenant's own jobs stay in arrival order
    assert [j for j in served if j.tenant == "key:heavy"] == heavy[:10]
