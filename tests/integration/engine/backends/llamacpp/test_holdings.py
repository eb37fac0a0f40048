"""What an engine says it holds of each conversation (engine/holdings.py), with the real
backend on the tiny GGUF: a conversation is named while it runs and while one of its
model's caches (the KV cache, host RAM) begins with its prompt's lead, and no longer once
the caches let that go; the last JOB taken comes with it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from coderai.bus.messages import Done
from coderai.engine.holdings import LEAD
from tests.integration.engine.backends.llamacpp.test_llamacpp_batching import (
    CONTEXT,
    engine,
    job,
    model,
)

#: two conversations whose prompts each fill most of the prefix cache's bound
FIRST = "Servers answer requests " * 30
SECOND = "and then some more words " * 20


def told(spec: dict[str, Any]) -> list[tuple[int, list[str]]]:
    """The holds report after each of: the first conversation's turn, the second's, then
    a short prompt's (below a lead: never named once it ends)."""

    async def run() -> list[tuple[int, list[str]]]:
        reports: list[tuple[int, list[str]]] = []
        async with engine() as eng:
            for job_id, (affinity, prompt) in enumerate(
                [("first", FIRST), ("second", SECOND), ("short", "one")], 1
            ):
                eng.scheduler.submit(job(job_id, spec, prompt, affinity=affinity, max_tokens=4))
                await eng.finished(job_id)
                done = eng.ended(job_id)
                assert isinstance(done, Done)
                assert (done.prompt_tokens >= LEAD) == (affinity != "short")
                # the report once its job has ended: the counters are read first, as the
                # scheduler publishes the report before them
                await eng.until(lambda: eng.scheduler.stats.get("tiny", {}).get("running") == 0
                                and eng.scheduler.holds[0] == job_id)  # noqa: B023  # fmt: skip
                taken, holds = eng.scheduler.holds
                assert not holds["tiny"].cut
                reports.append((taken, holds["tiny"].names))
        return reports

    return asyncio.run(run())


def test_a_conversation_is_held_until_its_caches_let_its_lead_go(
    tiny_models: tuple[Path, Path],
) -> None:
    # one prefix fits the cache's bound, and host RAM is off: the second evicts the first
    spec = model(tiny_models[1], prefix_cache_tokens=CONTEXT, prompt_cache_ram_mb=0)
    assert told(spec) == [(1, ["first"]), (2, ["second"]), (3, ["second"])]


def test_a_conversation_let_go_to_host_ram_is_still_held(tiny_models: tuple[Path, Path]) -> None:
    spec = model(tiny_models[1], prefix_cache_tokens=CONTEXT, prompt_cache_ram_mb=64)
    assert told(spec) == [(1, ["first"]), (2, ["second", "first"]), (3, ["second", "first"])]
