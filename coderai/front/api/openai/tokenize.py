"""/tokenize and /detokenize, in vLLM's and llama.cpp's server's shapes: a model's own
token ids for a prompt or a conversation, and the text of token ids.

The tokenizer lives with the model in an engine, so each is a job like an embedding job:
answered whole, by one TOKENS message before its DONE.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from coderai.bus.kinds import JobKind
from coderai.bus.messages import Tokens
from coderai.errors import CoderaiError, EngineFailed
from coderai.front.api.openai.schemas import DetokenizeRequest, TokenizeRequest, parse
from coderai.front.api.serving import Serving
from coderai.front.dispatch.jobs import FrontJob, Outcome
from coderai.front.http import ENGINE_HEADER, FRONT, error_response, read_json
from coderai.front.media.shown import show


class TokenizeRoutes:
    def __init__(self, serving: Serving) -> None:
        self.serving = serving

    def add_to(self, app: web.Application) -> None:
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)

    async def tokenize(self, request: web.Request) -> web.Response:
        req: TokenizeRequest = parse(TokenizeRequest, await read_json(request))
        entry = await self.serving.resolve(req.model)
        media = [p.medium() for m in req.messages or [] for p in m.media()]
        if media:  # what the model reads for them, found off the event loop (a PDF's text)
            await asyncio.to_thread(lambda: [show(medium) for medium in media])
        messages = [m.for_template() for m in req.messages or []]
        job, outcome = await self.serving.answer(
            entry,
            JobKind.TOKENIZE,
            prompt=req.prompt or "",
            messages=messages,
            add_generation_prompt=req.add_generation_prompt,
            template_kwargs=req.chat_template_kwargs or {},
        )
        answer = tokens_answer(job, outcome)
        if isinstance(answer, CoderaiError):
            return error_response(answer, job.served_by)
        body = {"tokens": answer.ids, "count": len(answer.ids), "max_model_len": answer.context}
        return web.json_response(body, headers={ENGINE_HEADER: job.served_by or FRONT})

    async def detokenize(self, request: web.Request) -> web.Response:
        req: DetokenizeRequest = parse(DetokenizeRequest, await read_json(request))
        entry = await self.serving.resolve(req.model)
        job, outcome = await self.serving.answer(entry, JobKind.DETOKENIZE, prompt_ids=req.tokens)
        answer = tokens_answer(job, outcome)
        if isinstance(answer, CoderaiError):
            return error_response(answer, job.served_by)
        return web.json_response(
            {"prompt": answer.text}, headers={ENGINE_HEADER: job.served_by or FRONT}
        )


def tokens_answer(job: FrontJob, outcome: Outcome) -> Tokens | CoderaiError:
    """What an ended tokenize or detokenize job answered, or why it has no answer."""
    if isinstance(outcome, CoderaiError):
        return outcome
    answer = job.tokens
    if not isinstance(answer, Tokens):  # a DONE without its TOKENS: an engine's fault
        return EngineFailed(f"engine {job.served_by} ended the job without its answer")
    return answer
