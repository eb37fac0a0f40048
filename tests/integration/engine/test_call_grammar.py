"""The grammars of a required or named call in each model's own format
(engine/decoding/call_grammar.py), held against real tokens of the tiny model's
vocabulary by llguidance: each format's own call is accepted (after reasoning, where the
model reasons), and each way of getting it wrong is refused: another format, a tool not
offered, a value of the wrong type, a second call where one is allowed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coderai.common.grammar import lark_grammar
from coderai.engine.decoding.call_grammar import own_grammar
from coderai.engine.decoding.marked_calls import MARKERS

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"enum": ["C", "F"]},
            },
            "required": ["city", "days"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
    },
}
TOOLS = [WEATHER, TIME]
ARGS = {"city": "Paris <b>", "days": 3}
V31, KIMI = MARKERS["deepseek_v31"], MARKERS["kimi_k2"]
#: each format's call of get_weather as the model writes it
CALLS = {
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": '
    + json.dumps(ARGS)
    + "}\n</tool_call>",
    "mistral": "[TOOL_CALLS]" + json.dumps([{"name": "get_weather", "arguments": ARGS}]),
    "llama3": json.dumps({"name": "get_weather", "parameters": ARGS}),
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis <b>\n"
    "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    "glm45": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris <b></arg_value>"
    "\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
    "deepseek_v31": f"{V31.section}{V31.begin}get_weather{V31.sep}{json.dumps(ARGS)}{V31.end}"
    f"{V31.section_end}",
    "kimi_k2": f"{KIMI.section}{KIMI.begin}functions.get_weather:0{KIMI.sep}{json.dumps(ARGS)}"
    f"{KIMI.end}{KIMI.section_end}",
    "harmony": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    + json.dumps(ARGS)
    + "<|call|>",
}
#: each format's call with a wrong value: days is no integer
WRONG = {fmt: text.replace("3", '"three"', 1) for fmt, text in CALLS.items()}
WRONG["qwen3_coder"] = CALLS["qwen3_coder"].replace("\n3\n", "\nthree\n")
WRONG["glm45"] = CALLS["glm45"].replace(">3<", ">three<")


@pytest.fixture(scope="module")
def tokenizer(tiny_models: tuple[Path, Path]) -> Any:
    import llguidance.hf
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(tiny_models[0])
    return llguidance.hf.from_tokenizer(tokenizer)


def accepts(tokenizer: Any, lark: str, text: str) -> bool:
    """Whether the grammar takes the whole text and may end there."""
    import llguidance

    matcher = llguidance.LLMatcher(tokenizer, lark_grammar(lark), log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    taken = matcher.consume_tokens(tokenizer.tokenize_str(text))
    return bool(taken) and not matcher.is_error() and bool(matcher.is_accepting())


def text_only(_marker: str) -> int | None:
    return None  # the tiny vocabulary holds none of these markers as a special token


@pytest.mark.parametrize("fmt", CALLS)
def test_each_formats_own_call_is_taken_and_a_wrong_one_refused(tokenizer: Any, fmt: str) -> None:
    grammar = own_grammar(TOOLS, fmt, text_only)
    assert accepts(tokenizer, grammar, CALLS[fmt])
    assert not accepts(tokenizer, grammar, WRONG[fmt])
    other = "qwen3_coder" if fmt == "hermes" else "hermes"
    assert not accepts(tokenizer, grammar, CALLS[other])  # a format foreign to the model
    unknown = CALLS[fmt].replace("get_weather", "rm_rf")
    assert not accepts(tokenizer, grammar, unknown)  # a tool not offered


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_coder", "glm45", "llama3"])
def test_several_calls_only_where_parallel_calls_are_allowed(tokenizer: Any, fmt: str) -> None:
    separator = "; " if fmt == "llama3" else "\n"
    two = CALLS[fmt] + separator + CALLS[fmt]
    assert accepts(tokenizer, own_grammar(TOOLS, fmt, text_only), two)
    assert not accepts(tokenizer, own_grammar(TOOLS, fmt, text_only, parallel=False), two)


def test_a_named_tool_is_the_only_one_callable(tokenizer: Any) -> None:
    grammar = own_grammar([TIME], "qwen3_coder", text_only)
    assert not accepts(tokenizer, grammar, CALLS["qwen3_coder"])
    time = "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</function>\n"
    assert accepts(tokenizer, grammar, time + "</tool_call>")


def test_an_enum_value_is_one_of_its_values(tokenizer: Any) -> None:
    grammar = own_grammar([WEATHER], "glm45", text_only)
    unit = CALLS["glm45"].replace(
        "\n</tool_call>", "\n<arg_key>unit</arg_key>\n<arg_value>{}</arg_value>\n</tool_call>"
    )
    assert accepts(tokenizer, grammar, unit.format("C"))
    assert not accepts(tokenizer, grammar, unit.format("K"))


@pytest.mark.parametrize(
    ("think", "before"),
    [
        ("think", "<think>\nWeather first.\n</think>\n\n"),
        ("think", ""),  # thinking is free, not required
        ("opened", "Weather first.\n</think>\n\n"),  # its prompt opened <think>
    ],
)
def test_a_reasoning_model_may_think_before_its_call(
    tokenizer: Any, think: str, before: str
) -> None:
    grammar = own_grammar(TOOLS, "hermes", text_only, think=think)
    assert accepts(tokenizer, grammar, before + CALLS["hermes"])
    # a call inside the thinking is thinking: the grammar still wants the call after it
    assert not accepts(tokenizer, grammar, "<think>" + CALLS["hermes"] + "</think>")


def test_gpt_oss_may_analyse_before_its_call(tokenizer: Any) -> None:
    grammar = own_grammar(TOOLS, "harmony", text_only, think="harmony")
    analysis = "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant"
    assert accepts(tokenizer, grammar, analysis + CALLS["harmony"])
    assert accepts(tokenizer, grammar, CALLS["harmony"])
    assert not accepts(tokenizer, grammar, "<|channel|>final<|message|>Sunny.<|return|>")


def test_a_special_token_marker_is_a_token_not_text(tokenizer: Any) -> None:
    """Where the vocabulary holds a marker as a special token, the grammar asks for that
    token: the same characters written as text are no marker."""
    special = tokenizer.tokenize_str("<|assistant|>")
    assert len(special) == 1 and tokenizer.is_special_token(special[0])

    def as_special(marker: str) -> int | None:
        return special[0] if marker == "<tool_call>" else None

    grammar = own_grammar(TOOLS, "hermes", as_special)
    assert "<[" in grammar
    assert not accepts(tokenizer, grammar, CALLS["hermes"])  # "<tool_call>" as text
    assert accepts(tokenizer, grammar, CALLS["hermes"].replace("<tool_call>", "<|assistant|>"))


def test_a_value_that_may_be_a_string_is_text_as_the_model_writes_it(tokenizer: Any) -> None:
    """A nullable string (pydantic's Optional[str]), a schema that names no type and a
    reference to a string enum are all text: quotes would stay in the parsed value."""
    from coderai.engine.decoding.tool_parse import ToolCallParser

    tool = {"type": "function", "function": {"name": "note", "parameters": {
        "type": "object",
        "properties": {
            "title": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "body": {"description": "anything"},
            "unit": {"$ref": "#/definitions/Unit"},
            "count": {"type": "integer"},
        },
        "definitions": {"Unit": {"enum": ["C", "F"]}},
    }}}  # fmt: skip
    grammar = own_grammar([tool], "qwen3_coder", text_only)
    call = (
        "<tool_call>\n<function=note>\n<parameter=title>\nPlan\n</parameter>\n"
        "<parameter=body>\na <b> c\n</parameter>\n<parameter=unit>\nF\n</parameter>\n"
        "<parameter=count>\n2\n</parameter>\n</function>\n</tool_call>"
    )
    assert accepts(tokenizer, grammar, call)
    assert not accepts(tokenizer, grammar, call.replace("\nF\n", "\nK\n"))
    parser = ToolCallParser("auto", "qwen3_coder", tools=[tool])
    deltas = parser.feed(call).calls + parser.finish().calls
    arguments = json.loads("".join(d.arguments for d in deltas))
    assert arguments == {"title": "Plan", "body": "a <b> c", "unit": "F", "count": 2}


def test_a_value_ends_at_its_first_closing_tag_as_the_parser_ends_it(tokenizer: Any) -> None:
    grammar = own_grammar([WEATHER], "qwen3_coder", text_only)
    cut = CALLS["qwen3_coder"].replace("Paris <b>", "a</parameter>b")
    assert not accepts(tokenizer, grammar, cut)  # what the parser would cut short


def test_glm_tags_that_are_special_tokens_are_asked_for_as_tokens(tokenizer: Any) -> None:
    """GLM's vocabulary holds its tags as tokens: the grammar asks for those tokens (the
    tiny vocabulary's special tokens stand in for them here)."""
    stand_ins = {"<arg_key>": "<|user|>", "</arg_key>": "<|system|>",
                 "<arg_value>": "<|assistant|>", "</arg_value>": "<|pad|>"}  # fmt: skip
    ids = {tag: tokenizer.tokenize_str(token) for tag, token in stand_ins.items()}
    assert all(len(i) == 1 and tokenizer.is_special_token(i[0]) for i in ids.values())

    def special(marker: str) -> int | None:
        return ids[marker][0] if marker in ids else None

    grammar = own_grammar([WEATHER], "glm45", special)
    as_tokens = CALLS["glm45"]
    for tag, token in stand_ins.items():
        as_tokens = as_tokens.replace(tag, token)
    assert accepts(tokenizer, grammar, as_tokens)
    assert not accepts(tokenizer, grammar, CALLS["glm45"])  # the tags spelt out as text


@pytest.mark.parametrize("fmt", ["qwen3_coder", "glm45", "deepseek_v31", "kimi_k2"])
def test_a_begun_calls_rest_is_its_own_formats(tokenizer: Any, fmt: str) -> None:
    """tool_choice auto: from after the opening marker the model wrote, the rest of the
    call in its own markup (for a section, its calls and its end)."""
    from coderai.engine.decoding.call_grammar import lazy_own_grammar

    opening = "<tool_call>" if fmt in ("qwen3_coder", "glm45") else MARKERS[fmt].section
    rest = CALLS[fmt][len(opening) :]
    grammar = lazy_own_grammar(TOOLS, fmt, text_only)
    assert accepts(tokenizer, grammar, rest)
    assert not accepts(tokenizer, grammar, WRONG[fmt][len(opening) :])
