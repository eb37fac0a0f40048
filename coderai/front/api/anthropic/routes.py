"""Anthropic's Messages API: POST /v1/messages (whole or streamed) and
POST /v1/messages/count_tokens, over the same chat job as chat completions.

Every error these routes answer is in Anthropic's shape ({"type": "error", "error":
{"type", "message"}}), which its SDK and Claude Code read. Like the OpenAI routes they
need no key: `x-api-key` and `anthropic-version`, which Anthropic's clients always send,
are accepted and not checked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from coderai.bus.kinds import JobKind
from coderai.catalogue.model_facts import sees_images
from coderai.config import SearchConfig
from coderai.errors import CoderaiError
from coderai.front.api import affinity, event_relay
from coderai.front.api.anthropic import reply as anthropic_reply
from coderai.front.api.anthropic.reply import MessageStream, message_id, refuse
from coderai.front.api.anthropic.request import (
    NOT_BUILT,
    RENAMES,
    CountTokensRequest,
    MessagesRequest,
)
from coderai.front.api.anthropic.server_tools import Runner, urls_in
from coderai.front.api.openai.schemas import ChatRequest
from coderai.front.api.openai.tokenize import tokens_answer
from coderai.front.api.serving import Serving
from coderai.front.api.translation import chat_request, submit_chat, validate
from coderai.front.http import ENGINE_HEADER, FRONT, from_http_exception, notify, read_json

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: the path of its routes: what the front refuses under it is in Anthropic's shape too
PREFIX = "/v1/messages"


def anthropic_errors(handler: Handler) -> Handler:
    """The route's errors in Anthropic's shape (the front's boundary would answer
    OpenAI's); a failure of ours still reaches the boundary, which logs it."""

    async def answering(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except CoderaiError as exc:
            return refuse(exc)
        except web.HTTPException as exc:  # e.g. a body over the size limit
            if exc.status < 400:
                raise
            return refuse(from_http_exception(exc))

    return answering


class AnthropicRoutes:
    def __init__(self, serving: Serving, search: Callable[[], SearchConfig] = SearchConfig) -> None:
        self.serving = serving
        #: the search backend's settings as they are now (the config may be replaced)
        self.search = search

    def add_to(self, app: web.Application) -> None:
        app.router.add_post(PREFIX, anthropic_errors(self.messages))
        app.router.add_post(PREFIX + "/count_tokens", anthropic_errors(self.count_tokens))

    async def messages(self, request: web.Request) -> web.StreamResponse:
        req = validate(MessagesRequest, await read_json(request), NOT_BUILT)
        affinity.claim(req.metadata.user_id if req.metadata is not None else None)
        # Anthropic allows more stop sequences than chat completions' 4; the engine takes
        # any number, so they join the request after its checks
        chat = chat_request(req.chat_body(), RENAMES).model_copy(
            update={"stop": req.stop_sequences}
        )
        entry = await self.serving.resolve(chat.model)
        await chat.read_media(sees_images(entry), self.serving.media())
        notify(request, chat.notices)
        job = submit_chat(self.serving, chat, entry)
        server = req.server_tool_names()
        seen = urls_in(" ".join(m.text() for m in chat.messages))
        run = Runner(self.search(), req.server_limits(), seen, req.server_uses())
        renderer = None
        try:
            if req.stream:
                renderer = MessageStream(message_id(), entry.id, server, run, job.wake.set)
                dispatcher = self.serving.dispatcher
                return await event_relay.stream(
                    request, dispatcher, self.serving.metrics, job, renderer, refuse
                )
            got = await event_relay.collect(job)
            if not isinstance(job.outcome, CoderaiError):
                assert job.outcome is not None
                calls = anthropic_reply.server_calls(got, server)
                results = [await run(name, arguments, i) for name, arguments, i in calls]
                body = anthropic_reply.whole(
                    message_id(), entry.id, got, job.outcome, server, results
                )
                return web.json_response(body, headers={ENGINE_HEADER: job.served_by or FRONT})
            return refuse(job.outcome, job.served_by)
        finally:
            # the handler ends early only when the client went away (or a write failed)
            self.serving.dispatcher.cancel(job)
            if renderer is not None:
                renderer.cancel()

    async def count_tokens(self, request: web.Request) -> web.Response:
        """The prompt's tokens as the model reads them: its chat template applied to the
        messages and tools, by the engine that holds its tokenizer."""
        req = validate(CountTokensRequest, await read_json(request), NOT_BUILT)
        chat: ChatRequest = chat_request(req.chat_body(), RENAMES)
        entry = await self.serving.resolve(chat.model)
        await chat.read_media(sees_images(entry), self.serving.media())
        tools = chat.tool_fields()
        job, outcome = await self.serving.answer(
            entry,
            JobKind.TOKENIZE,
            messages=[m.for_template() for m in chat.messages],
            tools=tools["tools"],
            tool_choice=tools["tool_choice"],
            images=chat.images(),
        )
        answer = tokens_answer(job, outcome)
        if isinstance(answer, CoderaiError):
            return refuse(answer, job.served_by)
        body = {"input_tokens": len(answer.ids)}
        return web.json_response(body, headers={ENGINE_HEADER: job.served_by or FRONT})
