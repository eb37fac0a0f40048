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
import re
import time
from collections.abc import Callable
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


_TAG = r"(<[^<>\s]+>|\[[^\[\]\s]+\])"
_TAG_AT_END = re.compile(_TAG + r"$")
_TAG_AT_START = re.compile("^" + _TAG)


def _environment() -> Any:
    """Jinja as the backends render chat templates (catalogue/templatefile.py's), with the helpers
    Hugging Face's templates call: a fixed date stands in for today's."""
    from coderai.catalogue.templatefile import _environment as chat_environment

    def refuse(message: str) -> None:
        raise ValueError(message)

    def tojson(value: Any, indent: Any = None, separators: Any = None,
               sort_keys: bool = False, **_: Any) -> str:  # fmt: skip
        return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators,
                          sort_keys=sort_keys)  # fmt: skip

    env = chat_environment()
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = refuse
    env.globals["strftime_now"] = lambda fmt: time.strftime(fmt, time.gmtime(0))
    return env


#: what a job gives a template: (messages, tools) (chat_template.template_input)
Prepare = Callable[[Job, str], tuple[list[dict[str, Any]], list[Any] | None]]


def _render(
    compiled: Any, template: str, job: Job, add_generation_prompt: bool, prepare: Prepare
) -> str | None:
    try:
        messages, tools = prepare(job, template)
        return str(compiled.render(messages=messages, tools=tools,
                                   add_generation_prompt=add_generation_prompt,
                                   bos_token="", eos_token=""))  # fmt: skip
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


def _call_format(markup: str, source: str, one: str, two: str | None) -> Probed:
    """The format of a probe call's markup (`one`, `two`: the renderings of one call and
    of two)."""
    if f"to=functions.{PROBE_NAME}" in markup:
        return Probed("harmony")
    if re.search(r"<tool_call>\s*<function=" + PROBE_NAME + ">", markup):
        return Probed("qwen3_coder")
    after = markup.split(PROBE_NAME, 1)[1] if PROBE_NAME in markup else ""
    if "<tool_call>" in markup and after.lstrip().startswith("<arg_key>"):
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
    if not isinstance(body, dict) or body.get("name") != PROBE_NAME:
        return Probed()  # another shape (a list of calls, a `tool_name` key)
    before = _TAG_AT_END.search(markup[: bounds[0]].rstrip())
    after_tag = _TAG_AT_START.search(markup[bounds[1] :].lstrip())
    if before is None or after_tag is None:
        bare = not markup[: bounds[0]].strip() or markup[: bounds[0]].strip() == "<|python_tag|>"
        return Probed("llama3") if bare and "parameters" in body else Probed()
    tags = (before.group(1), after_tag.group(1))
    if "arguments" not in body:
        return Probed()
    if tags == ("<tool_call>", "</tool_call>"):
        return Probed("hermes")
    # tags of the family's own, if each call has its own pair (not one block of several)
    own = tags[0] in source and tags[1] in source and two is not None
    if own and two is not None and all(two.count(t) > one.count(t) for t in tags):
        return Probed("hermes", call_tags=tags)
    return Probed()


def _think_tags(rendered: str, plain: str, source: str) -> tuple[str, str] | None:
    """The tags right beside the probe thought in the rendering that holds it: tags
    (`<...>`, `[...]`) of the template's own text, the opening one nowhere in the
    rendering without the thought (a tag every message has opens no thinking)."""
    at = rendered.find(PROBE_THOUGHT)
    if at < 0:
        return None
    start = _TAG_AT_END.search(rendered[:at].rstrip())
    end = _TAG_AT_START.search(rendered[at + len(PROBE_THOUGHT) :].lstrip())
    if start is None or end is None:
        return None
    tags = (start.group(1), end.group(1))
    if not (tags[0] in source and tags[1] in source):
        return None
    return tags if tags[0] not in plain else None


def probe(template: str, prepare: Prepare) -> Probed:
    """What the template renders of a call and of reasoning (see the module's text),
    each job given to it as `prepare` gives a backend's (chat_template.template_input)."""
    try:
        compiled = _environment().from_string(template)
    except Exception:  # a template that does not compile tells nothing
        return Probed()
    ask = {"role": "user", "content": "probe"}
    answer = {"role": "assistant", "content": PROBE_ANSWER}
    called = {"role": "assistant", "content": "", "tool_calls": [_PROBE_CALL]}
    second = {**_PROBE_CALL, "id": "call_probe_2"}
    twice = {**called, "tool_calls": [_PROBE_CALL, second]}

    def job(*messages: dict[str, Any]) -> Job:
        return Job(0, {}, "chat", messages=list(messages), tools=[_PROBE_TOOL], tool_choice="auto")

    found = Probed()
    plain = _render(compiled, template, job(ask, answer), False, prepare)
    with_call = _render(compiled, template, job(ask, called), False, prepare)
    if with_call is not None and plain is not None:
        two = _render(compiled, template, job(ask, twice), False, prepare)
        found = _call_format(_middle(with_call, plain), template, with_call, two)
    thought = {**answer, "reasoning_content": PROBE_THOUGHT}
    with_thought = _render(compiled, template, job(ask, thought), False, prepare)
    if with_thought is not None and plain is not None:
        tags = _think_tags(with_thought, plain, template)
        found = Probed(found.tool_format, found.call_tags, tags)
    return found
