"""What an ended tokenize or detokenize job answers (tokenize.tokens_answer); the routes
are tested in tests/integration."""

from __future__ import annotations

from coderai.bus.kinds import FinishReason
from coderai.bus.messages import Done, Job, Tokens
from coderai.catalogue.entries import ModelEntry
from coderai.errors import EngineFailed, NoEngine
from coderai.front.api.openai.tokenize import tokens_answer
from coderai.front.dispatch.jobs import FrontJob


def tokenize_job(served_by: str | None = "engine-0", tokens: Tokens | None = None) -> FrontJob:
    entry = ModelEntry(id="m", format="fake")
    job = FrontJob(1, entry, "fake", Job(1, entry.spec("fake"), "tokenize", "hi"))
    job.served_by = served_by
    job.tokens = tokens
    return job


def done() -> Done:
    return Done(1, FinishReason.STOP, 2, 0)


def test_a_job_that_ended_with_its_tokens_answers_them() -> None:
    tokens = Tokens(1, ids=[5, 6], context=4096)
    assert tokens_answer(tokenize_job(tokens=tokens), done()) is tokens
    text = Tokens(1, text="hello")
    assert tokens_answer(tokenize_job(tokens=text), done()) is text


def test_a_job_that_failed_answers_its_error_even_with_tokens() -> None:
    refusal = NoEngine("no engine can run 'm' now")
    assert tokens_answer(tokenize_job(), refusal) is refusal
    assert tokens_answer(tokenize_job(tokens=Tokens(1, ids=[5])), refusal) is refusal


def test_a_done_without_tokens_is_the_engines_fault_naming_it() -> None:
    answer = tokens_answer(tokenize_job(served_by="engine-3"), done())
    assert isinstance(answer, EngineFailed)
    assert (answer.status, answer.code) == (503, "engine_failed")
    assert answer.message == "engine engine-3 ended the job without its answer"
