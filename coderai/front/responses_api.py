"""OpenAI's Responses API: POST /v1/responses (whole or streamed), over the same chat job
as chat completions. Responses are not stored (`store: false`); errors are OpenAI's
envelope, as on every other OpenAI route."""

from __future__ import annotations

from aiohttp import web

from coderai.errors import CoderaiError
from coderai.front import event_relay, responses_reply
from coderai.front.http import ENGINE_HEADER, FRONT, error_response, read_json
from coderai.front.openai_api import OpenAIRoutes
from coderai.front.responses_reply import ResponseStream
from coderai.front.responses_request import NOT_BUILT, RENAMES, ResponsesRequest
from coderai.front.translation import chat_request, validate


class ResponsesRoutes:
    def __init__(self, openai: OpenAIRoutes) -> None:
        self.openai = openai

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self.create)

    async def create(self, request: web.Request) -> web.StreamResponse:
        req = validate(ResponsesRequest, await read_json(request), NOT_BUILT)
        chat = chat_request(req.chat_body(), RENAMES)
        entry = await self.openai.resolve(chat.model)
        start = responses_reply.head(req, entry.id)
        job = self.openai.submit_chat(chat, entry)
        dispatcher = self.openai.dispatcher
        try:
            if req.stream:
                renderer = ResponseStream(start)
                return await event_relay.stream(request, dispatcher, job, renderer, error_response)
            got = await event_relay.collect(job)
            if isinstance(job.outcome, CoderaiError):
                return error_response(job.outcome, job.served_by)
            assert job.outcome is not None
            body = responses_reply.whole(start, got, job.outcome)
            return web.json_response(body, headers={ENGINE_HEADER: job.served_by or FRONT})
        finally:
            # the handler ends early only when the client went away (or a write failed)
            dispatcher.cancel(job)
