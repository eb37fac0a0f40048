"""The OpenAI-compatible routes: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import asyncio
import base64
import logging
import struct
import time
import uuid
from typing import Any

from aiohttp import web

from coderai.bus.kinds import JobKind
from coderai.bus.messages import Done
from coderai.catalogue.entries import ModelEntry
from coderai.catalogue.model_facts import ModelFacts, from_file, sees_images
from coderai.errors import CoderaiError, ModelFileError
from coderai.front.api import affinity
from coderai.front.api.openai import choices, text_relay
from coderai.front.api.openai.choices import ChoiceStream
from coderai.front.api.openai.model_listing import Placement, model_object, placements
from coderai.front.api.openai.reply import StreamTemplate, error_event, whole_response
from coderai.front.api.openai.schemas import ChatRequest, CompletionRequest, EmbeddingRequest, parse
from coderai.front.api.serving import Serving
from coderai.front.api.stream_io import Preamble, open_stream, progress_comment, relay
from coderai.front.auth import activity
from coderai.front.dispatch.jobs import FrontJob, collect
from coderai.front.dispatch.output import Collected
from coderai.front.http import ENGINE_HEADER, FRONT, error_response, notify, read_json


def encode_vector(vector: list[float], encoding: str) -> list[float] | str:
    """OpenAI's base64 form is the little-endian float32 bytes of the vector."""
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector


def job_fields(req: ChatRequest | CompletionRequest) -> dict[str, Any]:
    """A request's sampling, tool and logprob fields, which each of its jobs carries."""
    fields: dict[str, Any] = dict(
        max_tokens=req.token_limit(),
        stop=req.stops(),
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        min_p=req.min_p,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        logit_bias=req.logit_bias or {},
        seed=req.seed,
    )
    if isinstance(req, ChatRequest):
        fields.update(req.tool_fields(), logprobs=req.logprobs, top_logprobs=req.top_logprobs,
                      reasoning_effort=req.reasoning_effort or "",
                      thinking_budget=-1 if req.thinking_token_budget is None
                      else req.thinking_token_budget,
                      template_kwargs=req.chat_template_kwargs or {},
                      images=req.images())  # fmt: skip
    elif req.logprobs is not None:
        fields.update(logprobs=True, top_logprobs=req.logprobs)
    return fields


log = logging.getLogger("coderai.front")


class OpenAIRoutes:
    def __init__(self, serving: Serving) -> None:
        self.serving = serving
        self.dispatcher = serving.dispatcher
        self.directory = serving.directory
        self.metrics = serving.metrics

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_get("/v1/models", self.list_models)
        # a model id may hold slashes ("org/name")
        app.router.add_get("/v1/models/{model:.+}", self.retrieve_model)

    async def list_models(self, request: web.Request) -> web.Response:
        """The catalogue, as far as the request's API key may use it, with each model's
        facts (model_listing.py)."""
        entries = [e for e in self.directory.entries() if activity.may_use(e)]
        facts = await asyncio.to_thread(lambda: [self._file_facts(e) for e in entries])
        residents = self._residents()
        data = [
            model_object(e.id, f, placements(e, residents))
            for e, f in zip(entries, facts, strict=True)
        ]
        return web.json_response({"object": "list", "data": data}, headers={ENGINE_HEADER: FRONT})

    async def retrieve_model(self, request: web.Request) -> web.Response:
        """The SDKs' models.retrieve: the model as listed, under the name asked for (an
        alias answers as itself), or a 404 model_not_found."""
        name = request.match_info["model"]
        entry = self.directory.entry(name)
        activity.check_model(entry)
        facts = await asyncio.to_thread(self._file_facts, entry)
        body = model_object(name, facts, placements(entry, self._residents()))
        return web.json_response(body, headers={ENGINE_HEADER: FRONT})

    def _file_facts(self, entry: ModelEntry) -> ModelFacts:
        """An entry's facts from its files (read in a worker thread: a GGUF's header)."""
        try:
            fmt: str | None = self.directory.format_of(entry)
        except ModelFileError:
            fmt = None
        return from_file(entry, fmt)

    def _residents(self) -> list[Placement]:
        return [
            (record.name, resident)
            for record in self.dispatcher.registry.all()
            for resident in record.residents
        ]

    async def chat(self, request: web.Request) -> web.StreamResponse:
        req: ChatRequest = parse(ChatRequest, await read_json(request))
        affinity.claim(req.prompt_cache_key, req.user)
        entry = await self.serving.resolve(req.model)
        await req.read_media(sees_images(entry), self.serving.media())
        notify(request, req.notices)
        messages = [m.for_template() for m in req.messages]
        return await self._run(request, req, entry, JobKind.CHAT, [{"messages": messages}], [""])

    async def completions(self, request: web.Request) -> web.StreamResponse:
        req: CompletionRequest = parse(CompletionRequest, await read_json(request))
        affinity.claim(req.prompt_cache_key, req.user)
        entry = await self.serving.resolve(req.model)
        payloads, echoes = [], []
        for prompt in req.prompts():
            text, ids = (prompt, []) if isinstance(prompt, str) else ("", prompt)
            payloads.append({"prompt": text, "prompt_ids": ids, "suffix": req.suffix or ""})
            echoes.append(text if req.echo else "")
        return await self._run(request, req, entry, JobKind.COMPLETION, payloads, echoes)

    async def embeddings(self, request: web.Request) -> web.Response:
        req: EmbeddingRequest = parse(EmbeddingRequest, await read_json(request))
        entry = await self.serving.resolve(req.model)
        job, outcome = await self.serving.answer(
            entry, JobKind.EMBEDDING, inputs=req.texts(), input_ids=req.token_ids()
        )
        if isinstance(outcome, CoderaiError):
            return error_response(outcome, job.served_by)
        data = [
            {"object": "embedding", "index": i, "embedding": encode_vector(v, req.encoding_format)}
            for i, v in enumerate(job.vectors or [])
        ]
        usage = {"prompt_tokens": outcome.prompt_tokens, "total_tokens": outcome.prompt_tokens}
        body = {"object": "list", "data": data, "model": entry.id, "usage": usage}
        return web.json_response(body, headers={ENGINE_HEADER: job.served_by or FRONT})

    async def _run(
        self,
        request: web.Request,
        req: ChatRequest | CompletionRequest,
        entry: ModelEntry,
        kind: JobKind,
        payloads: list[dict[str, Any]],
        echoes: list[str],
    ) -> web.StreamResponse:
        """Run a request's prompts (payloads: each one's job fields), n choices each."""
        fields = job_fields(req)
        chat = kind == JobKind.CHAT
        response_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        if req.user is not None:  # recorded, as OpenAI keeps it, and used for nothing else
            log.info("%s for user %r", response_id, req.user[:200])
        created = int(time.time())
        structured = bool(fields.get("logprobs") or fields.get("tools"))
        if req.n > 1 or len(payloads) > 1 or structured:
            jobs = self.serving.submit_choices(entry, kind, req.n, fields, payloads)
            # choice p * n + i is choice i of prompt p, and echoes that prompt
            echoed = [echo for echo in echoes for _ in range(req.n)]
            try:
                if req.stream:
                    include = req.include_usage()
                    stream = ChoiceStream(
                        chat, response_id, created, entry.id, include, len(jobs), echoed
                    )
                    return await self._stream_many(request, jobs, stream, len(payloads))
                wants = bool(fields.get("logprobs"))
                return await self._whole_many(
                    jobs, chat, response_id, created, wants, echoed, len(payloads)
                )
            finally:
                for job in jobs:
                    self.dispatcher.cancel(job)
        job = self.serving.submit(entry, kind, **fields, **payloads[0])
        try:
            if req.stream:
                template = StreamTemplate(
                    chat, response_id, created, entry.id, req.include_usage(), echoes[0]
                )
                return await self._stream(request, job, template)
            return await self._whole(job, chat, response_id, created, echoes[0])
        finally:
            # the handler ends early only when the client went away (or a write failed)
            self.dispatcher.cancel(job)

    async def _whole_many(
        self,
        jobs: list[FrontJob],
        chat: bool,
        response_id: str,
        created: int,
        logprobs: bool,
        echoes: list[str],
        prompts: int,
    ) -> web.Response:
        collected = [Collected() for _ in jobs]
        while not collect(jobs, collected):
            await jobs[0].wait()
        for job in jobs:
            if isinstance(job.outcome, CoderaiError):
                return error_response(job.outcome, job.served_by)
        dones = [job.outcome for job in jobs if isinstance(job.outcome, Done)]
        body = choices.whole(
            chat,
            response_id,
            created,
            jobs[0].entry.id,
            collected,
            dones,
            prompts,
            logprobs,
            echoes,
        )
        return web.json_response(body, headers={ENGINE_HEADER: jobs[0].served_by or FRONT})

    async def _stream_many(
        self, request: web.Request, jobs: list[FrontJob], stream: ChoiceStream, prompts: int
    ) -> web.StreamResponse:
        """Every choice's events as they come; each choice's finish once it ends; then the
        usage and [DONE] once all have. An error ends the whole stream."""
        keepalive = self.dispatcher.settings.stream_keepalive_seconds
        response = await open_stream(request, jobs, error_response, keepalive)
        if not response.prepared:
            return response
        finished: set[int] = set()
        preamble = Preamble(lambda _prompt: stream.opening(), progress_comment, keepalive)

        def advance() -> tuple[bytes, bool]:
            events, failed, done = stream.advance(jobs, finished, prompts, self.dispatcher.resume)
            if failed is not None:
                events += error_event(failed)
            return events, done

        # the first job stands for the stream with the stall reaper, which interrupts the
        # one handler once (every job holds while the client lags: open_stream)
        self.dispatcher.streams.add(jobs[0])
        try:
            await relay(request, response, jobs, preamble, advance, error_event)
        finally:
            self.dispatcher.streams.discard(jobs[0])
        return response

    async def _whole(
        self, job: FrontJob, chat: bool, response_id: str, created: int, echo: str
    ) -> web.Response:
        got = Collected(text=[echo])
        while job.outcome is None:
            await job.wait()
            for item in job.take_items():
                got.add(item)
        outcome = job.outcome
        if isinstance(outcome, CoderaiError):
            return error_response(outcome, job.served_by)
        body = whole_response(
            chat, response_id, created, job.entry.id, got.content(), outcome, got.reasoning()
        )
        return web.json_response(body, headers={ENGINE_HEADER: job.served_by or FRONT})

    async def _stream(
        self, request: web.Request, job: FrontJob, template: StreamTemplate
    ) -> web.StreamResponse:
        keepalive = self.dispatcher.settings.stream_keepalive_seconds
        response = await open_stream(request, [job], error_response, keepalive)
        if not response.prepared:
            return response
        self.dispatcher.streams.add(job)
        try:
            await text_relay.relay(request, response, job, template, self.dispatcher, self.metrics)
        finally:
            self.dispatcher.streams.discard(job)
        return response
