"""The job service every API route uses: the model a request names (as far as its key may
use it), jobs submitted for it, a job answered whole, and n choices that wake one handler.
OpenAI's routes, Anthropic's Messages, the Responses API, tokenize and the broker's answers
all run their requests through it, whatever their wire format."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from coderai.bus.kinds import JobKind
from coderai.bus.messages import Job
from coderai.catalogue.entries import ModelEntry
from coderai.config import MediaConfig
from coderai.front.api import affinity
from coderai.front.auth import activity
from coderai.front.dispatch.catalogue import ModelDirectory
from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.jobs import FrontJob, Outcome
from coderai.front.metrics import Metrics


class Serving:
    def __init__(
        self,
        dispatcher: Dispatcher,
        directory: ModelDirectory,
        metrics: Metrics,
        media: Callable[[], MediaConfig] = MediaConfig,
    ) -> None:
        self.dispatcher = dispatcher
        self.directory = directory
        self.metrics = metrics
        #: the config's media section as it is now (images by URL: web/image.py)
        self.media = media

    async def resolve(self, name: str) -> ModelEntry:
        """The catalogue entry a request names, if the request's API key may use it."""
        activity.check_model(self.directory.entry(name))  # before any work on its file
        return await self.directory.resolve(name)

    def submit(
        self,
        entry: ModelEntry,
        kind: JobKind,
        structured: bool = False,
        wake: asyncio.Event | None = None,
        **fields: Any,
    ) -> FrontJob:
        """A job for the model, queued or dispatched, and counted in the request's activity."""
        job_id = self.dispatcher.next_job_id()
        replicas = self.directory.replicas_of(entry)
        belongs = affinity.of(fields) if replicas else ""
        message = Job(job_id=job_id, model=self.directory.spec_of(entry), kind=kind,
                      affinity=belongs, **fields)  # fmt: skip
        capability = self.directory.capability_of(entry)
        tenant, weight = activity.share()
        job = FrontJob(job_id, entry, capability, message, self.directory.owner_of(entry),
                       replicas=replicas, affinity=belongs, structured=structured,
                       wake=wake or asyncio.Event(), tenant=tenant, weight=weight)  # fmt: skip
        self.dispatcher.submit(job)
        activity.attach(job)
        return job

    def submit_chat(
        self, entry: ModelEntry, messages: list[dict[str, Any]], fields: dict[str, Any]
    ) -> FrontJob:
        """One chat choice whose output is taken as pieces (text, reasoning, tool calls):
        the translated APIs' one internal job."""
        return self.submit(entry, JobKind.CHAT, structured=True, messages=messages, **fields)

    async def answer(
        self, entry: ModelEntry, kind: JobKind, **fields: Any
    ) -> tuple[FrontJob, Outcome]:
        """Run a job answered whole (embeddings, tokens) to its end: the job and how it
        ended. A handler that ends early (its client went away) cancels it."""
        job = self.submit(entry, kind, **fields)
        try:
            while job.outcome is None:
                await job.wait()
        finally:
            self.dispatcher.cancel(job)
        return job, job.outcome

    def submit_choices(
        self,
        entry: ModelEntry,
        kind: JobKind,
        n: int,
        fields: dict[str, Any],
        payloads: list[dict[str, Any]],
    ) -> list[FrontJob]:
        """n choices of each prompt: jobs that wake one handler. A seeded request seeds
        choice i of a prompt with seed + i, so the choices differ and each repeats."""
        wake = asyncio.Event()
        jobs = []
        seed = fields.get("seed")
        try:
            for payload in payloads:
                for i in range(n):
                    choice = {
                        **fields,
                        **payload,
                        "seed": None if seed is None else (seed + i) % 2**63,
                    }
                    jobs.append(self.submit(entry, kind, structured=True, wake=wake, **choice))
        except BaseException:  # a full queue refuses the rest: the ones taken go too
            for job in jobs:
                self.dispatcher.cancel(job)
            raise
        return jobs

    def cancel(self, job: FrontJob) -> None:
        self.dispatcher.cancel(job)
