"""The format detection table: each model family's chat template (tests/support/
families.py) → the call format and reasoning format read from it, whether its prompt
opens the reasoning, and what it renders of a tool loop's conversation."""

from __future__ import annotations

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from coderai.bus.messages import Job
from coderai.engine.decoding.chat_template import reasoning_format, template_input, tool_format
from coderai.engine.decoding.reasoning import opens_reasoning
from tests.support.families import CONVERSATION, FAMILIES, WEATHER, Family


@pytest.mark.parametrize("name", FAMILIES)
def test_each_familys_formats_are_read_from_its_template(name: str) -> None:
    family = FAMILIES[name]
    assert tool_format(family.template, {}) == family.tool_format
    assert reasoning_format(family.template, {}) == family.reasoning_format


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
