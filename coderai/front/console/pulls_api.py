"""/admin/api/pulls: models fetched from the Hugging Face hub by the front while it serves
(pull/ does the fetching), and added to the catalogue once every file is in and checked.

`POST /admin/api/pulls {"model": "USER/REPO[:QUANT|/FILE]", "id"?}` looks the repo up
first, so a missing repo, quantisation or file, or a gated repo, is its 400 at once; then
answers 202 with the pull, which goes on in a worker thread (two at a time: the others
wait, "queued"). Each change is a `pull` event on the console's live feed; `GET` lists them
(the feed's `pulls` snapshot is the same list); `DELETE /admin/api/pulls/{id}` cancels one
at its next chunk. A pull that fails or is cancelled adds no entry and leaves no partial
file (a file already fetched and checked stays in the cache, and the next pull of that
model uses it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from coderai.catalogue.entries import ModelEntry
from coderai.errors import CoderaiError, Conflict, NotFound
from coderai.front.http import ADMIN_PREFIX, read_json, validate
from coderai.front.live_feed import LiveFeed

if TYPE_CHECKING:
    # imported where a pull starts: the hub's library takes 0.2-0.4 s to import, which
    # every front start would pay
    from coderai.pull import download
    from coderai.pull.plan import Plan

log = logging.getLogger("coderai.front")

#: downloads at once: more share the same link and disk without finishing any sooner
WORKERS = 2
#: ended pulls kept for the console
KEPT = 20


class PullBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    id: str | None = Field(default=None, min_length=1)
    #: fetch the repo's vision projector too: the model reads images
    mmproj: bool = False


@dataclass
class Pull:
    id: str
    model: str
    entry_id: str
    repo: str
    files: list[str]
    progress: download.Progress
    state: str = "queued"
    error: str | None = None
    projector: str | None = None
    #: whether the projector is fetched with the model (the entry then reads images)
    projector_fetched: bool = False
    started: float = field(default_factory=time.time)

    def public(self) -> dict[str, Any]:
        p = self.progress
        return {"id": self.id, "model": self.model, "entry_id": self.entry_id,
                "repo": self.repo, "files": self.files, "state": self.state,
                "file": p.file, "done": p.done, "total": p.total, "error": self.error,
                "projector": self.projector, "projector_fetched": self.projector_fetched,
                "started": self.started}  # fmt: skip

    @property
    def active(self) -> bool:
        return self.state in ("queued", "downloading", "adding")


class Pulls:
    def __init__(
        self,
        feed: LiveFeed,
        add: Callable[[ModelEntry], Awaitable[object]],
        taken: Callable[[str], bool],
        endpoint: str | None = None,
    ) -> None:
        self.feed = feed
        #: adds a finished pull's entry to the catalogue (AdminRoutes.add)
        self.add = add
        #: whether a model id or alias is in the catalogue already
        self.taken = taken
        self.endpoint = endpoint
        self._pulls: dict[str, Pull] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._executor = ThreadPoolExecutor(WORKERS, thread_name_prefix="coderai-pull")
        self._count = 0
        feed.snapshot("pulls", self.snapshot)

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(ADMIN_PREFIX + "pulls", self.list)
        app.router.add_post(ADMIN_PREFIX + "pulls", self.start)
        app.router.add_delete(ADMIN_PREFIX + "pulls/{id}", self.cancel)
        app.on_shutdown.append(self._stop)

    def snapshot(self) -> dict[str, Any]:
        return {"pulls": [p.public() for p in self._pulls.values()]}

    async def list(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())

    async def start(self, request: web.Request) -> web.Response:
        from coderai.pull import download

        body = validate(PullBody, await read_json(request))
        if any(p.active and p.model == body.model for p in self._pulls.values()):
            raise Conflict(f"{body.model} is being pulled already", param="model")
        where = download.Hub.from_env(self.endpoint)
        job, commit = await asyncio.to_thread(download.resolve, where, body.model)
        if body.mmproj:
            job = download.with_projector(job)
        entry_id = body.id or job.id
        if self.taken(entry_id) or any(
            p.active and p.entry_id == entry_id for p in self._pulls.values()
        ):
            raise Conflict(f"the catalogue has {entry_id} already: send another id", param="id")
        self._count += 1
        files = [f.name for f in job.files]
        pull = Pull(f"pull-{self._count}", body.model, entry_id, job.repo, files,
                    download.Progress(total=job.size), projector=job.projector,
                    projector_fetched=body.mmproj)  # fmt: skip
        self._keep(pull)
        task = asyncio.get_running_loop().create_task(self._run(pull, where, job, commit))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return web.json_response(pull.public(), status=202)

    async def cancel(self, request: web.Request) -> web.Response:
        pull = self._pulls.get(request.match_info["id"])
        if pull is None:
            raise NotFound(f"no pull {request.match_info['id']!r}")
        if pull.state == "adding":
            raise Conflict(f"{pull.model} is in; its entry is being added")
        if pull.active:
            pull.progress.cancel()
        return web.json_response(pull.public())

    def _keep(self, pull: Pull) -> None:
        self._pulls[pull.id] = pull
        ended = [p for p in self._pulls.values() if not p.active]
        for old in ended[: max(0, len(ended) - KEPT)]:
            del self._pulls[old.id]
        self._publish(pull)

    def _publish(self, pull: Pull) -> None:
        self.feed.publish("pull", pull.public())

    async def _run(self, pull: Pull, where: download.Hub, job: Plan, commit: str) -> None:
        from coderai.pull import download

        loop = asyncio.get_running_loop()
        shown = [-1]

        def report(progress: download.Progress) -> None:
            # from the pulling thread: a percent's change (or a new file) reaches the feed
            share = progress.done * 100 // max(progress.total, 1)
            if share != shown[0] or progress.done == 0:
                shown[0] = share
                loop.call_soon_threadsafe(self._moved, pull)

        pull.progress.report = report

        def fetch() -> Any:
            pull.progress.check()  # cancelled while it was queued
            loop.call_soon_threadsafe(self._began, pull)
            return download.fetch(where, job, commit, pull.progress)

        try:
            path = await loop.run_in_executor(self._executor, fetch)
            pull.progress.check()
            pull.state = "adding"
            self._publish(pull)
            projector = download.projector_path(where, job, commit)
            fields = {"id": pull.entry_id, **download.entry_fields(job, path, projector)}
            await self.add(ModelEntry.model_validate(fields))
            pull.state = "done"
            log.info("pulled %s as %s (%s)", pull.model, pull.entry_id, path)
        except download.Cancelled:
            pull.state = "cancelled"
        except CoderaiError as exc:
            pull.state, pull.error = "failed", exc.message
            log.warning("pull of %s failed: %s", pull.model, exc.message)
        except Exception as exc:  # a fault of ours: the pull ends, the front goes on
            log.exception("pull of %s failed", pull.model)
            pull.state, pull.error = "failed", f"{exc.__class__.__name__}: {exc}"
        self._keep(pull)

    def _began(self, pull: Pull) -> None:
        if pull.state == "queued":
            pull.state = "downloading"
            self._publish(pull)

    def _moved(self, pull: Pull) -> None:
        if pull.state == "downloading":
            self._publish(pull)

    async def _stop(self, app: web.Application) -> None:
        """At shutdown: every pull is cancelled at its next chunk; none holds the exit."""
        for pull in self._pulls.values():
            pull.progress.cancel()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._executor.shutdown(wait=False, cancel_futures=True)
