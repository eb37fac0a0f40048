"""A model's call and reasoning formats, read from what its chat template renders.

The template is rendered twice for each feature, with and without it: a turn that calls
a probe tool against the same turn answering in text, and a turn with probe reasoning
against the same turn without. What the first rendering holds that the second does not
is the markup the model was taught: the call's (`<tool_call>{"name": …}</tool_call>`,
`<function=…>`, `to=functions.…`, …) and the reasoning's tags. A known family's markup
names its format; JSON calls between tags of their own (a new family) are read as Hermes
reads them, with those tags; reasoning between tags of its own is split at those tags.
So a model whose template writes calls or thinking in a way not seen before works
without new code. A template that renders nothing of a feature (one that drops earlier
reasoning, as DeepSeek-R1's does) says nothing here: the markers in its source decide
(chat_template.py).

Rendering is Jinja's sandbox with the helpers Hugging Face's templates use; a template
that fails on the probe (it raises, or needs what is not given) says nothing either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from coderai.bus.messages import Job
from coderai.engine.decoding.marked_calls import MARKERS

PROBE_NAME = "coderai_probe_tool"
PROBE_THOUGHT = "coderai probe thought"
PROBE_ANSWER = "coderai probe answer"
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": PROBE_NAME,
        "description": "a probe",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
    },
}
_PROBE_CALL = {
    "id": "call_probe",
    "type": "function",
    "function": {"name": PROBE_NAME, "arguments": '{"key": "value"}'},
}


@dataclass(frozen=True)
class Probed:
    """What the renderings say: the call format (None: they do not tell), the tags of a
    Hermes-like format's calls, and the reasoning's tags (None: not rendered)."""

    tool_format: str | None = None
    call_tags: tuple[str, str] | None = None
    think_tags: tuple[str, str] | None = None


def _render(template: str, job: Job, add_generation_prompt: bool) -> str | None:
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from coderai.engine.decoding.chat_template import template_input

    def refuse(message: str) -> None:
        raise ValueError(message)

    def tojson(value: Any, indent: Any = None, **_: Any) -> str:
        return json.dumps(value, ensure_ascii=False, indent=indent)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = refuse
    try:
        messages, tools = template_input(job, template)
        return str(
            env.from_string(template).render(
                messages=messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                bos_token="",
                eos_token="",
            )
        )
    except Exception:  # a template that cannot render the probe tells nothing
        return None


def _middle(with_it: str, without: str) -> str:
    """What `with_it` holds between the text it shares with `without` at both ends."""
    start = 0
    limit = min(len(with_it), len(without))
    while start < limit and with_it[start] == without[start]:
        start += 1
    end = 0
    while end < limit - start and with_it[-1 - end] == without[-1 - end]:
        end += 1
    return with_it[start : len(with_it) - end]


def _json_object(text: str, at: int) -> tuple[int, int] | None:
    """The bounds of the JSON object around position `at` (its innermost enclosing `{`)."""
    start = text.rfind("{", 0, at)
    while start >= 0:
        try:
            _, length = json.JSONDecoder().raw_decode(text[start:])
        except ValueError:
            start = text.rfind("{", 0, start)
            continue
        if start + length > at:
            return start, start + length
        start = text.rfind("{", 0, start)
    return None


def _call_format(markup: str, source: str) -> Probed:
    """The format of a probe call's markup."""
    if f"to=functions.{PROBE_NAME}" in markup:
        return Probed("harmony")
    if f"<function={PROBE_NAME}>" in markup:
        return Probed("qwen3_coder")
    after = markup.split(PROBE_NAME, 1)[1] if PROBE_NAME in markup else ""
    if after.lstrip().startswith("<arg_key>"):
        return Probed("glm45")
    for name, markers in MARKERS.items():
        if markers.section in markup or markers.begin in markup:
            return Probed(name)
    if "[TOOL_CALLS]" in markup:
        return Probed("mistral")
    at = markup.find(f'"{PROBE_NAME}"')
    bounds = _json_object(markup, at) if at >= 0 else None
    if bounds is None:
        return Probed()
    body = json.loads(markup[bounds[0] : bounds[1]])
    # the tags: what stands right beside the JSON, up to any whitespace
    before = markup[: bounds[0]].split()[-1] if markup[: bounds[0]].split() else ""
    after = markup[bounds[1] :].split()[0] if markup[bounds[1] :].split() else ""
    if "parameters" in body or before in ("", "<|python_tag|>"):
        return Probed("llama3")
    if (before, after) == ("<tool_call>", "</tool_call>"):
        return Probed("hermes")
    if before and after and before in source and after in source:
        return Probed("hermes", call_tags=(before, after))  # tags of the family's own
    return Probed()


def _think_tags(markup: str, source: str) -> tuple[str, str] | None:
    at = markup.find(PROBE_THOUGHT)
    if at < 0:
        return None
    start, end = markup[:at].strip(), markup[at + len(PROBE_THOUGHT) :].strip()
    # the tags alone: what stands right beside the thought, up to any whitespace
    start = start.split()[-1] if start.split() else ""
    end = end.split()[0] if end.split() else ""
    # tags the template writes: text of its own (not a dump of the message, say)
    return (start, end) if start and end and start in source and end in source else None


def probe(template: str) -> Probed:
    """What the template renders of a call and of reasoning (see the module's text)."""
    ask = {"role": "user", "content": "probe"}
    answer = {"role": "assistant", "content": PROBE_ANSWER}
    called = {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL]}

    def job(*messages: dict[str, Any]) -> Job:
        return Job(0, {}, "chat", messages=list(messages), tools=[_PROBE_TOOL], tool_choice="auto")

    found = Probed()
    with_call = _render(template, job(ask, called), False)
    plain = _render(template, job(ask, answer), False)
    if with_call is not None and plain is not None:
        found = _call_format(_middle(with_call, plain), template)
    thought = {**answer, "reasoning_content": PROBE_THOUGHT}
    with_thought = _render(template, job(ask, thought), False)
    without = _render(template, job(ask, answer), False)
    if with_thought is not None and without is not None:
        tags = _think_tags(_middle(with_thought, without), template)
        found = Probed(found.tool_format, found.call_tags, tags)
    return found
