"""OpenAI's Responses API: POST /v1/responses (whole or streamed), over the same chat job
as chat completions. Responses are not stored (`store: false`); errors are OpenAI's
envelope, as on every other OpenAI route. Hosted tools the server cannot run are left
out, named in the X-CoderAI-Tools-Omitted header and logged (responses_request.py)."""

from __future__ import annotations

import logging

from aiohttp import web

from coderai.catalogue.model_facts import sees_images
from coderai.errors import CoderaiError, InvalidRequest
from coderai.front.api import affinity, event_relay
from coderai.front.api.responses import compaction
from coderai.front.api.responses import reply as responses_reply
from coderai.front.api.responses.reply import ResponseStream
from coderai.front.api.responses.request import NOT_BUILT, RENAMES, ResponsesRequest
from coderai.front.api.serving import Serving
from coderai.front.api.translation import chat_request, submit_chat, validate
from coderai.front.http import ENGINE_HEADER, FRONT, error_response, notify, read_json

#: names the hosted tools a request offered that the model was not offered (comma-separated)
OMITTED_HEADER = "X-CoderAI-Tools-Omitted"
log = logging.getLogger("coderai.front")


class ResponsesRoutes:
    def __init__(self, serving: Serving) -> None:
        self.serving = serving
        #: the sets of left-out tools already logged (an agent sends the same every turn)
        self._logged: set[tuple[str, ...]] = set()

    def _omitted(self, req: ResponsesRequest) -> dict[str, str]:
        """The header naming the tools not offered, if any, logged once per set."""
        omitted = tuple(req.omitted())
        if not omitted:
            return {}
        if omitted not in self._logged and len(self._logged) < 256:
            self._logged.add(omitted)
            log.info("/v1/responses: hosted tools this server cannot run are not offered to"
                     " the model: %s", ", ".join(omitted))  # fmt: skip
        return {OMITTED_HEADER: ", ".join(omitted)}

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self.create)
        app.router.add_post("/v1/responses/compact", self.compact)

    async def compact(self, request: web.Request) -> web.StreamResponse:
        """OpenAI's compact endpoint: the conversation's summary, and the user's latest
        messages, as a response.compaction object (compaction.py)."""
        body = await read_json(request)
        if isinstance(body, dict):
            if body.get("stream") not in (None, False):
                raise InvalidRequest("/v1/responses/compact answers whole", param="stream")
            given = body.get("input")
            given = [{"role": "user", "content": given}] if isinstance(given, str) else given
            if isinstance(given, list):
                body = {**body, "input": [*given, {"type": "compaction_trigger"}]}
        req = validate(ResponsesRequest, body, NOT_BUILT)
        chat = chat_request(req.chat_body(), RENAMES)
        entry = await self.serving.resolve(chat.model)
        await chat.read_media(sees_images(entry), self.serving.media())
        notify(request, chat.notices)
        job = submit_chat(self.serving, chat, entry)
        try:
            got = await event_relay.collect(job)
            if isinstance(job.outcome, CoderaiError):
                return error_response(job.outcome, job.served_by)
            assert job.outcome is not None
            answer = compaction.compacted(req, got, job.outcome)
            return web.json_response(answer, headers={ENGINE_HEADER: job.served_by or FRONT})
        finally:
            self.serving.dispatcher.cancel(job)

    async def create(self, request: web.Request) -> web.StreamResponse:
        req = validate(ResponsesRequest, await read_json(request), NOT_BUILT)
        affinity.claim(req.prompt_cache_key, req.safety_identifier, req.user)
        chat = chat_request(req.chat_body(), RENAMES)
        entry = await self.serving.resolve(chat.model)
        await chat.read_media(sees_images(entry), self.serving.media())
        notify(request, chat.notices)
        start = responses_reply.head(req, entry.id)
        headers = self._omitted(req)
        job = submit_chat(self.serving, chat, entry)
        dispatcher = self.serving.dispatcher
        try:
            if req.stream:
                renderer: event_relay.Renderer = ResponseStream(
                    start, req.namespaces(), req.shown()
                )
                if req.compacting():
                    renderer = compaction.CompactionStream(start)
                return await event_relay.stream(
                    request,
                    dispatcher,
                    self.serving.metrics,
                    job,
                    renderer,
                    error_response,
                    headers,
                )
            got = await event_relay.collect(job)
            if isinstance(job.outcome, CoderaiError):
                return error_response(job.outcome, job.served_by)
            assert job.outcome is not None
            if req.compacting():
                body = compaction.whole(start, got, job.outcome)
            else:
                body = responses_reply.whole(start, got, job.outcome, req.namespaces(), req.shown())
            headers[ENGINE_HEADER] = job.served_by or FRONT
            return web.json_response(body, headers=headers)
        finally:
            # the handler ends early only when the client went away (or a write failed)
            dispatcher.cancel(job)
