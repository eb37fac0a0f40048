"""A reasoning model's thinking through `coderai run`, read by the official openai client:
`reasoning_content` and `reasoning` apart from the answer, streamed and whole, on the plain
path and beside tool calls; a call written while thinking is no call; and by the anthropic
client as thinking blocks, and as the Responses API's reasoning items. The model is the
fake one, scripted to write what Qwen3 writes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.integration.front.api.test_tool_calls import _ask
from tests.support.server import Server, running

THOUGHT = "The user asks about Paris. I could write <tool_call>{} here, but not yet."
CALL = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
THINKER = f"<think>\n{THOUGHT}\n</think>\n\nIt is sunny in Paris."
CALLER = f"<think>\n{THOUGHT}\n</think>\n\nLet me check.<tool_call>\n{CALL}\n</tool_call>"
#: the same, as gpt-oss writes it: harmony's analysis channel, a preamble, a call
HARMONY_THINKER = (
    f"<|channel|>analysis<|message|>{THOUGHT}<|end|><|start|>assistant<|channel|>final"
    "<|message|>It is sunny in Paris.<|return|>"
)
HARMONY_CALLER = (
    f"<|channel|>analysis<|message|>{THOUGHT}<|end|><|start|>assistant<|channel|>commentary"
    "<|message|>Let me check.<|end|><|start|>assistant<|channel|>commentary"
    ' to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
)
LONG_THOUGHT = "ab" * 700
LONG_THINKER = f"<think>{LONG_THOUGHT}</think>Answer."
HARMONY_OPTIONS = {"tool_format": "harmony", "reasoning_format": "harmony"}
HARMONY_OPTIONS = {"tool_format": "harmony", "reasoning_format": "harmony"}
THINKERS = ["thinker", "gpt-oss-thinker"]
CALLERS = ["caller", "gpt-oss-caller"]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def _scripted(name: str, script: str, **options: Any) -> dict[str, Any]:
    options = {"script": script, "script_token_chars": 3, **options}
    return {"id": name, "format": "fake", "options": options}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    models = [
        _scripted("thinker", THINKER, reasoning_format="think"),
        _scripted("caller", CALLER, reasoning_format="think"),
        _scripted("gpt-oss-thinker", HARMONY_THINKER, **HARMONY_OPTIONS),
        _scripted("gpt-oss-caller", HARMONY_CALLER, **HARMONY_OPTIONS),
        # a thought of one token per character, longer than the least budget Messages takes
        _scripted("long-thinker", LONG_THINKER, reasoning_format="think", script_token_chars=1),
        _scripted("plain", THINKER),  # a model that does not reason: its text as written
    ]
    cache = tmp_path_factory.mktemp("cache")
    with running(tmp_path_factory.mktemp("reasoning"), models, cache) as srv:
        yield srv


def _extra(obj: Any, name: str) -> Any:
    """A field the SDK's types do not name (it keeps them as extras)."""
    return (obj.model_extra or {}).get(name)


def _streamed(oai: openai.OpenAI, model: str, **extra: Any) -> dict[str, Any]:
    got: dict[str, Any] = {"reasoning_content": "", "reasoning": "", "content": "", "calls": []}
    for chunk in _ask(oai, model, stream=True, **extra):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        for name in ("reasoning_content", "reasoning"):
            got[name] += _extra(delta, name) or ""
        got["content"] += delta.content or ""
        got["calls"] += [c.function.name for c in delta.tool_calls or [] if c.function.name]
        got["finish"] = chunk.choices[0].finish_reason or got.get("finish")
    return got


@pytest.mark.parametrize("model", THINKERS)
@pytest.mark.parametrize("stream", [False, True])
def test_thinking_comes_apart_from_the_answer(oai: openai.OpenAI, stream: bool, model: str) -> None:
    if stream:
        got = _streamed(oai, model)
        reasoning, also, content = got["reasoning_content"], got["reasoning"], got["content"]
    else:
        message = _ask(oai, model).choices[0].message
        reasoning = _extra(message, "reasoning_content")
        also, content = _extra(message, "reasoning"), message.content
    assert reasoning == also == THOUGHT
    assert content == "It is sunny in Paris."


@pytest.mark.parametrize("model", CALLERS)
@pytest.mark.parametrize("stream", [False, True])
def test_a_call_written_while_thinking_is_no_call(
    oai: openai.OpenAI, stream: bool, model: str
) -> None:
    if stream:
        got = _streamed(oai, model, tools=TOOLS)
        reasoning, content, names = got["reasoning_content"], got["content"], got["calls"]
        finish = got["finish"]
    else:
        choice = _ask(oai, model, tools=TOOLS).choices[0]
        reasoning, content = _extra(choice.message, "reasoning_content"), choice.message.content
        names = [c.function.name for c in choice.message.tool_calls or []]
        finish = choice.finish_reason
    assert reasoning == THOUGHT
    assert content == "Let me check."
    assert names == ["get_weather"] and finish == "tool_calls"


def test_several_choices_each_think_apart(oai: openai.OpenAI) -> None:
    response = _ask(oai, "thinker", n=2)
    for choice in response.choices:
        assert _extra(choice.message, "reasoning_content") == THOUGHT
        assert choice.message.content == "It is sunny in Paris."


def test_a_model_that_does_not_reason_answers_as_written(oai: openai.OpenAI) -> None:
    message = _ask(oai, "plain").choices[0].message
    assert message.content == THINKER and _extra(message, "reasoning_content") is None


# -- Anthropic's Messages API: thinking blocks -------------------------------------------------
ASK: Any = [{"role": "user", "content": "Weather in Paris?"}]
WEATHER: Any = {"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}


@pytest.mark.parametrize("model", CALLERS)
def test_messages_carry_the_thinking_as_a_thinking_block(
    claude: anthropic.Anthropic, model: str
) -> None:
    whole = claude.messages.create(model=model, max_tokens=200, tools=[WEATHER], messages=ASK)
    assert [b.type for b in whole.content] == ["thinking", "text", "tool_use"]
    thinking = whole.content[0]
    assert thinking.type == "thinking" and thinking.thinking == THOUGHT
    assert thinking.signature == ""  # nothing to sign locally (anthropic/reply.py)
    assert whole.content[1].type == "text" and whole.content[1].text == "Let me check."

    with claude.messages.stream(model=model, max_tokens=200, tools=[WEATHER], messages=ASK) as s:
        events: list[Any] = list(s)
        final = s.get_final_message()
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    thought = "".join(d.thinking for d in deltas if d.type == "thinking_delta")
    assert thought == THOUGHT
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].type == "thinking" and final.content[0].thinking == THOUGHT


# -- OpenAI's Responses API: reasoning items ---------------------------------------------------


@pytest.mark.parametrize("model", THINKERS)
def test_responses_carry_the_thinking_as_a_reasoning_item(oai: openai.OpenAI, model: str) -> None:
    whole = oai.responses.create(model=model, input="Weather in Paris?")
    assert [item.type for item in whole.output] == ["reasoning", "message"]
    reasoning = whole.output[0]
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert [c.text for c in reasoning.content] == [THOUGHT]
    assert whole.output_text == "It is sunny in Paris."

    events = list(oai.responses.create(model=model, input="Weather?", stream=True))
    deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(deltas) == THOUGHT
    done = [e for e in events if e.type == "response.reasoning_text.done"]
    assert [e.text for e in done] == [THOUGHT]
    final = events[-1]
    assert final.type == "response.completed"
    assert [item.type for item in final.response.output] == ["reasoning", "message"]
    numbers = [e.sequence_number for e in events]
    assert numbers == list(range(len(events)))


def test_asked_for_a_summary_the_reasoning_item_carries_the_thinking_as_it(
    oai: openai.OpenAI,
) -> None:
    """A local model writes no summary: the thinking is its own (Codex shows only these)."""
    whole = oai.responses.create(model="thinker", input="Weather?", reasoning={"summary": "auto"})
    item = whole.output[0]
    assert item.type == "reasoning" and [s.text for s in item.summary] == [THOUGHT]
    assert item.content is not None and [c.text for c in item.content] == [THOUGHT]
    plain = oai.responses.create(model="thinker", input="Weather?").output[0]
    assert plain.type == "reasoning" and not plain.summary

    events = list(
        oai.responses.create(
            model="thinker", input="Weather?", stream=True, reasoning={"summary": "detailed"}
        )
    )
    kinds = [e.type for e in events]
    assert kinds.index("response.reasoning_summary_part.added") < kinds.index(
        "response.reasoning_summary_part.done"
    )
    deltas = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert "".join(deltas) == THOUGHT
    done = [e.text for e in events if e.type == "response.reasoning_summary_text.done"]
    assert done == [THOUGHT]
    final = events[-1]
    assert final.type == "response.completed"
    item = final.response.output[0]
    assert item.type == "reasoning" and [s.text for s in item.summary] == [THOUGHT]
    assert item.encrypted_content is None  # not asked for

    # asked for its copy, as Codex asks: whole and streamed, a copy that reads back
    from coderai.front.api.responses.reasoning_copy import unseal

    copied = oai.responses.create(
        model="thinker", input="Weather?", include=["reasoning.encrypted_content"]
    ).output[0]
    assert copied.type == "reasoning" and unseal(copied.encrypted_content or "") == THOUGHT
    streamed = list(
        oai.responses.create(
            model="thinker", input="W?", stream=True, include=["reasoning.encrypted_content"]
        )
    )
    ended = [e.item for e in streamed if e.type == "response.output_item.done"]
    assert ended[0].type == "reasoning" and unseal(ended[0].encrypted_content or "") == THOUGHT


@pytest.mark.parametrize("model", THINKERS)
def test_the_usage_counts_the_thinking_tokens(oai: openai.OpenAI, model: str) -> None:
    """Tokens read while thinking (or that open or close it) are reasoning_tokens, part of
    the completion tokens; a model that does not reason spends none."""
    thought = _ask(oai, model).usage
    assert thought is not None and thought.completion_tokens_details is not None
    spent = thought.completion_tokens_details.reasoning_tokens or 0
    # the answer's tokens (3 characters each) are not reasoning
    answer = len("It is sunny in Paris.") // 3
    assert 0 < spent <= thought.completion_tokens - answer
    plain = _ask(oai, "plain").usage
    assert plain is not None and plain.completion_tokens_details is not None
    assert plain.completion_tokens_details.reasoning_tokens == 0

    chunks = list(_ask(oai, model, stream=True, stream_options={"include_usage": True}))
    streamed = chunks[-1].usage
    assert streamed is not None and streamed.completion_tokens_details is not None
    assert streamed.completion_tokens_details.reasoning_tokens == spent

    response = oai.responses.create(model=model, input="Weather?")
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == spent


# -- a thinking budget -------------------------------------------------------------------------
# The fake model writes its script whatever it is told; a forced end marker is a token of
# its own in it, as a real model's is (tests/integration/engine/backends/
# test_chat_templates.py forces it on the real backends).


def test_a_thinking_budget_ends_the_thinking_by_forcing_its_end(
    claude: anthropic.Anthropic, oai: openai.OpenAI
) -> None:
    budget = 1024  # the least Anthropic's API takes
    whole = claude.messages.create(
        model="long-thinker",
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": budget},
        messages=ASK,
    )
    # the token that opens <think> is thinking's first: budget - 1 of the thought follow,
    # then the forced </think>; the model then goes on with its script, as answer
    thought = LONG_THOUGHT[: budget - 1]
    assert [b.type for b in whole.content] == ["thinking", "text"]
    assert whole.content[0].type == "thinking" and whole.content[0].thinking == thought
    rest = LONG_THINKER[len("<think>") + len(thought) :]
    assert whole.content[1].type == "text" and whole.content[1].text == rest

    # on chat completions, vLLM's field; a budget the thinking fits in changes nothing
    cut = _ask(oai, "thinker", extra_body={"thinking_token_budget": 3})
    usage, message = cut.usage, cut.choices[0].message
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 3 + 1  # and the marker's
    assert THOUGHT.startswith(_extra(message, "reasoning_content"))
    roomy = _ask(oai, "thinker", extra_body={"thinking_token_budget": 1000}).choices[0].message
    assert _extra(roomy, "reasoning_content") == THOUGHT
    assert roomy.content == "It is sunny in Paris."
    # a model that does not reason is asked nothing by a budget
    plain = _ask(oai, "plain", extra_body={"thinking_token_budget": 0}).choices[0].message
    assert plain.content == THINKER


def test_a_harmony_budget_ends_the_analysis_in_the_final_channel(oai: openai.OpenAI) -> None:
    """No tools offered: the forced end opens the final channel, so gpt-oss answers
    instead of opening another analysis."""
    cut = _ask(oai, "gpt-oss-thinker", extra_body={"thinking_token_budget": 3})
    usage, message = cut.usage, cut.choices[0].message
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 3 + 1  # and the marker's
    reasoning = _extra(message, "reasoning_content")
    assert reasoning and THOUGHT.startswith(reasoning) and reasoning != THOUGHT
    # the rest of the script is in the final channel now: the answer, then its own final
    assert message.content == f"{THOUGHT[len(reasoning) :]}\n\nIt is sunny in Paris."


@pytest.mark.parametrize("budget", [-1, 2**31])
def test_a_budget_out_of_range_is_a_400_naming_it(oai: openai.OpenAI, budget: int) -> None:
    with pytest.raises(openai.BadRequestError, match="thinking_token_budget"):
        _ask(oai, "thinker", extra_body={"thinking_token_budget": budget})


def test_a_stop_sequence_matches_inside_the_thinking_too(oai: openai.OpenAI) -> None:
    """Stop sequences are matched on everything the model writes, its thinking included
    (as vLLM's): the output ends there, the thinking cut where the sequence began."""
    choice = _ask(oai, "thinker", stop=["Paris"]).choices[0]
    assert choice.finish_reason == "stop"
    assert _extra(choice.message, "reasoning_content") == THOUGHT[: THOUGHT.index("Paris")]
    assert not choice.message.content
