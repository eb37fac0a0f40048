"""What the node answers the broker's `models.list` and `chat.completions`: the catalogue,
and chats run through the same dispatcher as /v1/chat/completions (so a brokered request
lands on any compatible engine), validated by the same schema, recorded on the Activity
page like any API request (as the caller "broker").

A broker request has no HTTP connection: its replies are messages handed to `send`,
which waits while the WebSocket is slow (back-pressure reaches the engine through the
job's backlog, as a slow HTTP client's does).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from coderai.bus.kinds import JobKind
from coderai.bus.messages import Done
from coderai.errors import CoderaiError
from coderai.front.aisbf import wire
from coderai.front.api.openai import choices
from coderai.front.api.openai.choices import ChoiceStream
from coderai.front.api.openai.routes import job_fields
from coderai.front.api.openai.schemas import ChatRequest, parse
from coderai.front.api.serving import Serving
from coderai.front.auth.activity import Activity
from coderai.front.dispatch.jobs import FrontJob, collect
from coderai.front.dispatch.output import Collected

Send = Callable[[dict[str, Any]], Awaitable[None]]

#: while a whole answer is made, the broker hears that it is still coming this often
PENDING_EVERY = 20.0


class BrokerAnswers:
    def __init__(self, serving: Serving, activity: Activity) -> None:
        self.serving = serving
        self.activity = activity

    def models(self) -> dict[str, Any]:
        data = []
        for entry in self.serving.directory.entries():
            model: dict[str, Any] = {"id": entry.id, "name": entry.alias or entry.id}
            context = entry.options.get("n_ctx") or entry.options.get("context_length")
            if isinstance(context, int):
                model["context_length"] = context
            data.append(model)
        return {"object": "list", "data": data}

    async def chat(self, request_id: str, payload: dict[str, Any], send: Send) -> bool:
        """Answer one chat: the OpenAI body, or its stream's events then `done`. An error,
        before or during the stream, ends it as `wire.ending` says. Whether it ended in an
        error."""
        ticket = self.activity.open("broker:chat.completions", None, "broker", shown=True)
        status, client_left = 200, False
        jobs: list[FrontJob] = []
        try:
            # the broker sends the parameters it does not forward as nulls
            body = {k: v for k, v in payload.items() if v is not None}
            req: ChatRequest = parse(ChatRequest, body)
            entry = await self.serving.resolve(req.model)
            ticket.stream = req.stream
            messages = [m.for_template() for m in req.messages]
            jobs = self.serving.submit_choices(
                entry, JobKind.CHAT, req.n, job_fields(req), [{"messages": messages}]
            )
            head = (f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time()), entry.id)
            if req.stream:
                stream = ChoiceStream(True, *head, req.include_usage(), len(jobs))
                status, failed = await self._stream(request_id, jobs, stream, send)
            else:
                status, failed = await self._whole(request_id, jobs, head, req.logprobs, send)
            return failed
        except CoderaiError as exc:
            # a stream as the broker sees it, even when its payload was refused
            status = exc.status
            await send_failure(request_id, exc, wire.streams(payload), send)
            return True
        except (asyncio.CancelledError, ConnectionError):
            client_left = True  # the broker (or this node's socket to it) went away
            raise
        finally:
            for job in jobs:
                self.serving.dispatcher.cancel(job)
            self.activity.close(ticket, status, client_left)

    async def _stream(
        self, request_id: str, jobs: list[FrontJob], stream: ChoiceStream, send: Send
    ) -> tuple[int, bool]:
        """The choices' events as they come, one SSE event per chunk message, ending with
        `data: [DONE]` and then `done`; a failure ends it with an error event instead.
        The status HTTP would have answered, and whether it failed."""
        dispatcher = self.serving.dispatcher
        lead = jobs[0]
        for job in jobs:  # a lagging broker holds every choice (see open_stream)
            job.writer = asyncio.current_task()
        pending = stream.opening()
        finished: set[int] = set()
        started = False
        while True:
            events, failed, done = stream.advance(jobs, finished, 1, dispatcher.resume)
            pending += events
            if failed is not None:
                if started:  # what came before the failure, then the failure
                    await send_events(request_id, pending, send)
                await send_failure(request_id, failed, True, send)
                # before its first byte, HTTP would have answered with the error's status
                return (200 if started else failed.status), True
            if pending and (started or any(j.started for j in jobs) or done):
                started = True
                await send_events(request_id, pending, send)
                pending = b""
            if done:
                await send(wire.done(request_id))
                return 200, False
            await lead.wait()

    async def _whole(
        self,
        request_id: str,
        jobs: list[FrontJob],
        head: tuple[str, int, str],
        logprobs: bool,
        send: Send,
    ) -> tuple[int, bool]:
        collected = [Collected() for _ in jobs]
        lead = jobs[0]
        loop = asyncio.get_running_loop()
        # a deadline, not a timeout per wait: output wakes this loop at every token
        next_pending = loop.time() + PENDING_EVERY
        while not collect(jobs, collected):
            try:
                async with asyncio.timeout_at(next_pending):
                    await lead.wait()
            except TimeoutError:
                await send(wire.pending(request_id, PENDING_EVERY * 2))
                next_pending = loop.time() + PENDING_EVERY
        for job in jobs:
            if isinstance(job.outcome, CoderaiError):
                await send_failure(request_id, job.outcome, False, send)
                return job.outcome.status, True
        dones = [job.outcome for job in jobs if isinstance(job.outcome, Done)]
        body = choices.whole(True, *head, collected, dones, 1, logprobs, [""] * len(jobs))
        await send(wire.ok(request_id, body))  # over the frame limit, the sender refuses it
        return 200, False


async def send_events(request_id: str, data: bytes, send: Send) -> None:
    for event in wire.sse_events(data):
        await send(wire.chunk(request_id, event))


async def send_failure(request_id: str, exc: CoderaiError, stream: bool, send: Send) -> None:
    for frame in wire.ending(wire.failure(request_id, exc), stream):
        await send(frame)
