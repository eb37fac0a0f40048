"""The format detection table: each model family's chat template (tests/support/
families.py) → the call format and reasoning format read from it, whether its prompt
opens the reasoning, and what it renders of a tool loop's conversation."""

from __future__ import annotations

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from coderai.bus.messages import Job
from coderai.engine.decoding.chat_template import (
    reasoning_format,
    tags,
    template_input,
    tool_format,
)
from coderai.engine.decoding.reasoning import opens_reasoning
from tests.support.families import CONVERSATION, FAMILIES, WEATHER, Family


@pytest.mark.parametrize("name", FAMILIES)
def test_each_familys_formats_are_read_from_its_template(name: str) -> None:
    family = FAMILIES[name]
    assert tool_format(family.template, {}) == family.tool_format
    assert reasoning_format(family.template, {}) == family.reasoning_format
    if family.reasoning_format == "think" and family.tool_format == "hermes":
        assert tags(family.template) == (family.call_tags, family.think_tags)


def render(family: Family) -> str:
    job = Job(1, {}, "chat", messages=CONVERSATION, tools=[WEATHER], tool_choice="auto")
    messages, tools = template_input(job, family.template)

    def refuse(text: str) -> None:
        raise ValueError(text)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(family.template).render(
        messages=messages, tools=tools, add_generation_prompt=True, raise_exception=refuse
    )


@pytest.mark.parametrize("name", FAMILIES)
def test_each_family_renders_a_tool_loop_in_its_own_markup(name: str) -> None:
    family = FAMILIES[name]
    prompt = render(family)
    at = 0
    for fragment in family.rendered:
        found = prompt.find(fragment, at)
        assert found >= 0, f"{fragment!r} not after {at} in {prompt!r}"
        at = found + len(fragment)
    assert opens_reasoning(prompt) is family.opens


def test_an_entrys_option_overrides_what_the_template_says() -> None:
    v31 = FAMILIES["deepseek_v31"].template
    assert tool_format(v31, {"tool_format": "deepseek_v31"}) == "deepseek_v31"
    assert reasoning_format(FAMILIES["qwen3"].template, {"reasoning_format": "none"}) == "none"


@pytest.mark.parametrize("size", [1, 3, 100])
def test_a_new_familys_own_tags_are_read_by_the_splitter_and_the_call_parser(size: int) -> None:
    """Nothing here knows the novel family: its tags come from what its template renders,
    and its thinking and calls are read at those tags, however the output is cut."""
    from coderai.engine.decoding.reasoning import ReasoningSplitter
    from coderai.engine.decoding.tool_parse import ToolCallParser

    call_tags, think_tags = tags(FAMILIES["novel"].template)
    output = (
        '<|ponder|>Weather, so the tool.<|/ponder|>Let me look.<|act|>\n{"name": '
        '"get_weather", "arguments": {"city": "Paris"}}<|/act|>'
    )
    splitter = ReasoningSplitter(tags=think_tags)
    parser = ToolCallParser("auto", "hermes", tags=call_tags)
    reasoning = content = arguments = ""
    names = []
    for piece in [*(output[i : i + size] for i in range(0, len(output), size)), None]:
        split = splitter.feed(piece) if piece is not None else splitter.finish()
        reasoning += split.reasoning
        parsed = parser.feed(split.content) if piece is not None else parser.finish()
        content += parsed.content
        for delta in parsed.calls:
            names += [delta.name] if delta.name else []
            arguments += delta.arguments
    assert reasoning == "Weather, so the tool."
    assert content == "Let me look."
    assert names == ["get_weather"] and arguments == '{"city": "Paris"}'


#: shapes that once fooled the probe, written here: an empty `</think>` on every answer
#: (GLM-4.7's), several calls in one block (MiniMax-M1's), and thinking as a message of
#: its own between tags every message has
EMPTY_CLOSE = (
    "{% for m in messages %}<|{{ m.role }}|>"
    "{% if m.role == 'assistant' %}{% if m.reasoning_content %}<think>{{ m.reasoning_content }}"
    "{% endif %}</think>{% endif %}{{ m.content }}{% endfor %}"
)
ONE_BLOCK = (
    "{% if tools %}Tools: {{ tools | tojson }}{% endif %}{% for m in messages %}"
    "<|{{ m.role }}|>{{ m.content }}{% if m.tool_calls %}<tool_calls>"
    "{% for c in m.tool_calls %}\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}'
    "{% endfor %}\n</tool_calls>{% endif %}{% endfor %}"
)
MESSAGE_TAGS = (
    "{% for m in messages %}{% if m.reasoning_content %}<|start|>to=self<|message|>"
    "{{ m.reasoning_content }}<|eom|>{% endif %}<|start|><|message|>{{ m.content }}<|eot|>"
    "{% endfor %}"
)


def test_the_probe_takes_only_tags_that_open_and_close_their_own_part() -> None:
    from coderai.engine.decoding.template_probe import probe

    # the thought's opening tag is new to it; the closing one every answer has
    assert probe(EMPTY_CLOSE, template_input).think_tags == ("<think>", "</think>")
    # several calls in one block: not Hermes-like tags of its own (each call needs a pair)
    assert probe(ONE_BLOCK, template_input).call_tags is None
    # a tag every message has opens no thinking
    assert probe(MESSAGE_TAGS, template_input).think_tags is None
    # a template that cannot render the probe tells nothing
    assert probe("{{ raise_exception('no') }}", template_input) == probe(
        "{% broken", template_input
    )
