"""Each model family's raw output, as the fake model writes it scripted, read through the
whole stack by the official clients on all three APIs, streamed and whole: its reasoning
(where the family reasons) with a look-alike of a call inside it that is no call, its
text, and one call or two, every token a few characters so that each marker is cut
across many tokens. Llama 3's output is its calls alone."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from coderai.engine.decoding.marked_calls import MARKERS
from tests.support.server import Server, running

ARGS: dict[str, Any] = {"city": 'Paris, "FR"', "days": 3}
TIME: dict[str, Any] = {"zone": "UTC"}
THOUGHT = "Weather first. Not yet: CALL"
TEXT = "Let me check."
V31, KIMI = MARKERS["deepseek_v31"], MARKERS["kimi_k2"]


def _hermes(name: str, args: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _xml(name: str, args: dict[str, Any]) -> str:
    values = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{values}</function>\n</tool_call>"


def _glm(name: str, args: dict[str, Any]) -> str:
    values = "".join(
        f"\n<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>" for k, v in args.items()
    )
    return f"<tool_call>{name}{values}\n</tool_call>"


def _section(markers: Any, calls: list[tuple[str, dict[str, Any]]], kimi: bool) -> str:
    body = "".join(
        f"{markers.begin}{'functions.' + n + ':' + str(i) if kimi else n}{markers.sep}"
        f"{json.dumps(a)}{markers.end}"
        for i, (n, a) in enumerate(calls)
    )
    return f"{markers.section}{body}{markers.section_end}"


def _harmony_call(name: str, args: dict[str, Any]) -> str:
    return (
        f"<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json"
        f"<|message|>{json.dumps(args)}<|call|>"
    )


def _output(family: str, calls: int) -> tuple[dict[str, str], str]:
    """(the fake's options, its script) for a family: reasoning with a call's look-alike
    in it, the text, then `calls` calls (get_weather, then get_time)."""
    pairs: list[tuple[str, dict[str, Any]]] = [("get_weather", ARGS), ("get_time", TIME)][:calls]
    if family == "harmony":
        lookalike = THOUGHT.replace("CALL", "to=functions.rm_rf")
        script = (
            f"<|channel|>analysis<|message|>{lookalike}<|end|><|start|>assistant"
            f"<|channel|>commentary<|message|>{TEXT}<|end|>"
            + "".join(_harmony_call(n, a) for n, a in pairs)
        )
        return {"tool_format": "harmony", "reasoning_format": "harmony"}, script
    if family == "llama3":  # no reasoning, no text: the output is its calls
        calls_text = "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in pairs)
        return {"tool_format": "llama3"}, "<|python_tag|>" + calls_text
    writers = {"qwen3": _hermes, "qwen3_coder": _xml, "glm45": _glm}
    if family in writers:
        fmt = "hermes" if family == "qwen3" else family
        write = writers[family]
        body = "".join(write(n, a) for n, a in pairs)
        lookalike = write("rm_rf", {})
    elif family == "mistral":
        fmt = "mistral"
        body = "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a} for n, a in pairs])
        lookalike = "[TOOL_CALLS][]"
    else:  # deepseek_v31, kimi_k2: sections of calls
        fmt = family
        markers = V31 if family == "deepseek_v31" else KIMI
        body = _section(markers, pairs, family == "kimi_k2")
        lookalike = _section(markers, [("rm_rf", {})], family == "kimi_k2")
    thought = THOUGHT.replace("CALL", lookalike)
    return {
        "tool_format": fmt,
        "reasoning_format": "think",
    }, f"<think>\n{thought}\n</think>\n\n{TEXT}{body}"


FAMILIES = [
    "qwen3", "qwen3_coder", "glm45", "mistral", "llama3", "deepseek_v31", "kimi_k2", "harmony"
]  # fmt: skip
WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
}
TIME_PARAMS = {"type": "object", "properties": {"zone": {"type": "string"}}}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME_PARAMS}},
]
WANTED = {1: [("get_weather", ARGS)], 2: [("get_weather", ARGS), ("get_time", TIME)]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    models = []
    for family in FAMILIES:
        for calls in (1, 2):
            options, script = _output(family, calls)
            fake = {**options, "script": script, "script_token_chars": 3}
            models.append({"id": f"{family}-{calls}", "format": "fake", "options": fake})
    cache = tmp_path_factory.mktemp("cache")
    with running(tmp_path_factory.mktemp("family-outputs"), models, cache) as srv:
        yield srv


def _thought(family: str) -> str:
    if family == "llama3":
        return ""
    _, script = _output(family, 1)
    start = script.index("<|message|>" if family == "harmony" else "<think>\n")
    start += len("<|message|>" if family == "harmony" else "<think>\n")
    end = script.index("<|end|>" if family == "harmony" else "\n</think>")
    return script[start:end]


def _text(family: str) -> str:
    return "" if family == "llama3" else TEXT


ASK: Any = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.mark.parametrize("calls", [1, 2])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions(oai: openai.OpenAI, family: str, calls: int, stream: bool) -> None:
    model = f"{family}-{calls}"
    if stream:
        reasoning, text, finish = "", "", ""
        got: dict[int, list[str]] = {}
        chunk: Any
        for chunk in oai.chat.completions.create(
            model=model, messages=ASK, tools=TOOLS, stream=True
        ):
            delta = chunk.choices[0].delta
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            text += delta.content or ""
            for call in delta.tool_calls or []:
                entry = got.setdefault(call.index, ["", ""])
                entry[0] += call.function.name or ""
                entry[1] += call.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        found = [(n, json.loads(a)) for n, a in (got[i] for i in sorted(got))]
    else:
        choice: Any = oai.chat.completions.create(model=model, messages=ASK, tools=TOOLS).choices[0]
        reasoning = (choice.message.model_extra or {}).get("reasoning_content") or ""
        text, finish = choice.message.content or "", choice.finish_reason
        found = [
            (c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls or []
        ]
    assert reasoning == _thought(family)
    assert text == _text(family)
    assert found == WANTED[calls] and finish == "tool_calls"


@pytest.mark.parametrize("calls", [1, 2])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stream", [False, True])
def test_messages(claude: anthropic.Anthropic, family: str, calls: int, stream: bool) -> None:
    tools: Any = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
                  for t in TOOLS]  # fmt: skip
    ask: Any = ASK
    message: Any
    if stream:
        with claude.messages.stream(model=f"{family}-{calls}", max_tokens=500, tools=tools,
                                    messages=ask) as s:  # fmt: skip
            message = s.get_final_message()
    else:
        message = claude.messages.create(model=f"{family}-{calls}", max_tokens=500, tools=tools,
                                         messages=ask)  # fmt: skip
    kinds = [b.type for b in message.content]
    told = ["thinking", "text"] if family != "llama3" else []
    assert kinds == [*told, *(["tool_use"] * calls)]
    if told:
        assert message.content[0].type == "thinking"
        assert message.content[0].thinking == _thought(family)
        assert message.content[1].type == "text" and message.content[1].text == TEXT
    uses = [(b.name, b.input) for b in message.content if b.type == "tool_use"]
    assert uses == WANTED[calls] and message.stop_reason == "tool_use"


@pytest.mark.parametrize("calls", [1, 2])
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stream", [False, True])
def test_responses(oai: openai.OpenAI, family: str, calls: int, stream: bool) -> None:
    tools: Any = [{"type": "function", "name": t["function"]["name"],
                   "parameters": t["function"]["parameters"]} for t in TOOLS]  # fmt: skip
    if stream:
        events = list(oai.responses.create(model=f"{family}-{calls}", input="Weather?",
                                           tools=tools, stream=True))  # fmt: skip
        final = events[-1]
        assert final.type == "response.completed"
        output = final.response.output
    else:
        output = oai.responses.create(
            model=f"{family}-{calls}", input="Weather?", tools=tools
        ).output
    told = ["reasoning", "message"] if family != "llama3" else []
    assert [item.type for item in output] == [*told, *(["function_call"] * calls)]
    found = [(i.name, json.loads(i.arguments)) for i in output if i.type == "function_call"]
    assert found == WANTED[calls]
    if not told:
        return
    reasoning = output[0]
    assert reasoning.type == "reasoning" and reasoning.content is not None
    assert [c.text for c in reasoning.content] == [_thought(family)]
    message = output[1]
    assert message.type == "message" and [
        c.text for c in message.content if c.type == "output_text"
    ] == [TEXT]
