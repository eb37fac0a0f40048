"""A real coding model, Qwen2.5-Coder-0.5B-Instruct, where SmolLM2 and the scripted fake
model cannot show anything: the tool calls it writes itself, through all three APIs,
streamed and whole; structured output; reasoning off; and aider editing a file with it.

Asked with tools at temperature 0 this model answers with the call alone, as bare JSON or
in a ```json fence, without its template's `<tool_call>` tags: each call test fails if the
reading of calls (tool_parse.py, bare_call.py) is taken away, and a twin entry with
`bare_tool_calls: false` shows what a client got before (the JSON as text).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import jsonschema
import openai
import pytest

from tests.support import agents, qwen
from tests.support.server import Server, openai_client, running

pytestmark = pytest.mark.timeout(240)

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city"}},
            "required": ["city"],
        },
    },
}
ASK: Any = [{"role": "user", "content": "What is the weather in Paris right now?"}]
PARIS = {"city": "Paris"}
#: temperature 0 for the anthropic SDK, whose create() no longer takes it as a keyword
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = str(qwen.gguf())
    options = {"n_ctx": qwen.CONTEXT}
    models = [
        {"id": "qwen-coder", "path": path, "options": options},
        {"id": "qwen-untagged-as-text", "path": path,
         "options": {**options, "bare_tool_calls": False}},
    ]  # fmt: skip
    with running(tmp_path_factory.mktemp("qwen"), models, qwen.cache_folder()) as srv:
        yield srv


@pytest.fixture
def oai(server: Server) -> Iterator[openai.OpenAI]:
    with openai_client(server) as client:
        yield client


@pytest.fixture
def claude(server: Server) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as client:
        yield client


def test_a_call_it_writes_is_a_call_in_chat_completions(oai: openai.OpenAI) -> None:
    answer = oai.chat.completions.create(
        model="qwen-coder", messages=ASK, tools=[WEATHER], temperature=0, max_tokens=80
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == PARIS  # type: ignore[union-attr]


def test_without_the_reading_of_untagged_calls_the_client_got_json_as_text(
    oai: openai.OpenAI,
) -> None:
    answer = oai.chat.completions.create(
        model="qwen-untagged-as-text", messages=ASK, tools=[WEATHER], temperature=0,
        max_tokens=80,
    )  # fmt: skip
    choice = answer.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert '"get_weather"' in (choice.message.content or "")


def test_a_call_it_writes_streams_as_tool_call_deltas(oai: openai.OpenAI) -> None:
    name, arguments, content, finish = "", "", "", None
    for chunk in oai.chat.completions.create(
        model="qwen-coder", messages=ASK, tools=[WEATHER], temperature=0, max_tokens=80,
        stream=True,
    ):  # fmt: skip
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            name += call.function.name or "" if call.function else ""
            arguments += call.function.arguments or "" if call.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert (name, json.loads(arguments), content, finish) == (
        "get_weather",
        PARIS,
        "",
        "tool_calls",
    )


def test_a_call_it_writes_is_a_tool_use_in_messages(claude: anthropic.Anthropic) -> None:
    tools: Any = [{"name": "get_weather", "description": "Get the current weather in a city",
                   "input_schema": WEATHER["function"]["parameters"]}]  # fmt: skip
    messages: Any = ASK
    answer = claude.messages.create(model="qwen-coder", max_tokens=80, tools=tools,
                                    messages=messages, extra_body=GREEDY)  # fmt: skip
    assert answer.stop_reason == "tool_use"
    (use,) = [b for b in answer.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("get_weather", PARIS)
    with claude.messages.stream(model="qwen-coder", max_tokens=80, tools=tools,
                                messages=messages, extra_body=GREEDY) as stream:  # fmt: skip
        final = stream.get_final_message()
    (streamed,) = [b for b in final.content if b.type == "tool_use"]
    assert (streamed.name, streamed.input, final.stop_reason) == (
        "get_weather", PARIS, "tool_use",
    )  # fmt: skip


def test_a_call_it_writes_is_a_function_call_in_responses(oai: openai.OpenAI) -> None:
    tools: Any = [{"type": "function", **WEATHER["function"]}]
    answer = oai.responses.create(model="qwen-coder", input=ASK[0]["content"], tools=tools,
                                  temperature=0, max_output_tokens=80)  # fmt: skip
    (call,) = [item for item in answer.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", PARIS)
    events = oai.responses.create(model="qwen-coder", input=ASK[0]["content"], tools=tools,
                                  temperature=0, max_output_tokens=80, stream=True)  # fmt: skip
    done = [event.item for event in events if event.type == "response.output_item.done"]
    (streamed,) = [item for item in done if item.type == "function_call"]
    assert (streamed.name, json.loads(streamed.arguments)) == ("get_weather", PARIS)


def test_code_it_writes_with_tools_offered_stays_text(oai: openai.OpenAI) -> None:
    ask: Any = [{"role": "user", "content": "Write a Python function add(a, b). Code only."}]
    answer = oai.chat.completions.create(
        model="qwen-coder", messages=ask, tools=[WEATHER], temperature=0, max_tokens=60
    )
    choice = answer.choices[0]
    assert not choice.message.tool_calls
    assert "def add" in (choice.message.content or "")


def test_structured_output_follows_its_schema(oai: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"language": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["language", "year"],
        "additionalProperties": False,
    }
    ask: Any = [
        {"role": "user", "content": "Which language did Guido van Rossum create, and when?"}
    ]
    answer = oai.chat.completions.create(
        model="qwen-coder", messages=ask, temperature=0, max_tokens=60,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "fact", "schema": schema, "strict": True}},
    )  # fmt: skip
    fact = json.loads(answer.choices[0].message.content or "")
    jsonschema.validate(fact, schema)  # what it says is the model's; its shape is ours


def test_reasoning_off_is_honoured_by_a_model_that_does_not_reason(
    oai: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    ask: Any = [{"role": "user", "content": "What is 2 + 3? Answer with the number."}]
    answer = oai.chat.completions.create(
        model="qwen-coder", messages=ask, temperature=0, max_tokens=8, reasoning_effort="none"
    )
    assert "5" in (answer.choices[0].message.content or "")
    messages: Any = ask
    reply = claude.messages.create(model="qwen-coder", max_tokens=8, messages=messages,
                                   thinking={"type": "disabled"}, extra_body=GREEDY)  # fmt: skip
    assert [b.type for b in reply.content] == ["text"]


BUGGY = '''def average(numbers):
    """The mean of a non-empty list of numbers."""
    return sum(numbers) / (len(numbers) + 1)
'''


def test_aider_fixes_a_bug_in_a_file_with_it(server: Server, tmp_path: Path) -> None:
    """A real agent edit: aider is asked to fix a one-line bug; the file left behind is
    judged (imported and run), never what aider says."""
    work = tmp_path / "work"
    work.mkdir()
    source = work / "stats.py"
    source.write_text(BUGGY)
    done = agents.aider(server.url, tmp_path, "qwen-coder",
                        "Fix the bug in average in stats.py: it divides by the wrong count.",
                        timeout=180, context=qwen.CONTEXT, files=["stats.py"])  # fmt: skip
    assert done.code == 0, done.describe()
    scope: dict[str, Any] = {}
    exec(compile(source.read_text(), str(source), "exec"), scope)
    assert scope["average"]([1, 2, 3, 6]) == 3, source.read_text() + "\n" + done.describe()
