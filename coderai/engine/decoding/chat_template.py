"""Which chat template a model's prompts are written with, what it receives for a job (its
messages and tools), and the format in which the model writes a tool call.

A catalogue entry's `chat_template` option, whose text the front sends (coderai/
catalogue/templatefile.py), stands in for the template the model ships, or gives one to a model that
ships none.

A template that knows tools (its source uses `tools`) gets them as Hugging Face's templates
expect: the `tools` variable, assistant messages with `tool_calls` whose arguments are
objects, and `tool` messages. A template that does not gets the documented fallback: a
system prompt that lists the tools and asks for Hermes-style calls
(`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`), earlier calls written that way
in the assistant's text, and tool results as user messages in `<tool_response>` tags.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from coderai.bus.messages import Job
from coderai.catalogue.templatefile import TEMPLATE_OPTION, check, is_inline
from coderai.engine.decoding.marked_calls import MARKERS
from coderai.engine.decoding.reasoning import END, REASONING_FORMATS, START
from coderai.engine.decoding.template_probe import Probed, probe
from coderai.engine.decoding.tool_parse import CALL_TAGS, FORMATS
from coderai.errors import ConfigError, JobError

FALLBACK_PROMPT = (
    "You may call these functions (JSON schemas):\n<tools>\n{tools}\n</tools>\n"
    "To call one, answer with its name and arguments as JSON inside tags, one per call:\n"
    '<tool_call>\n{{"name": "<name>", "arguments": {{<arguments>}}}}\n</tool_call>\n'
    "Results come back inside <tool_response></tool_response> tags."
)


def chosen_template(options: dict[str, Any], own: Any) -> Any:
    """The entry's template, else the model's own (None: it has none; transformers may
    hold several by name)."""
    given = options.get(TEMPLATE_OPTION)
    if given is None:
        return own
    # a path here is a spec the front did not make: its files are not this machine's
    if not isinstance(given, str) or not is_inline(given):
        raise JobError(f"the {TEMPLATE_OPTION} option is not a template's text", kind="bad_model")
    try:
        check(given, f"the {TEMPLATE_OPTION} option")
    except ConfigError as exc:
        raise JobError(exc.message, kind="bad_model") from None
    return given


def no_template() -> JobError:
    """The answer to a chat request for a model without a chat template."""
    return JobError(
        f"this model has no chat template: use /v1/completions, or give it one with the"
        f" {TEMPLATE_OPTION} option of its catalogue entry",
        kind="bad_request",
    )


#: gpt-oss's template takes three levels; the APIs name more. It cannot stop reasoning:
#: `none` asks for the least it does
_HARMONY_LEVELS = {"none": "low", "minimal": "low", "low": "low", "medium": "medium",
                   "high": "high", "xhigh": "high", "max": "high"}  # fmt: skip


def reasoning_switches(job: Job, template: str | None) -> dict[str, Any]:
    """The template variables that a reasoning switch reads, set from the job's effort:
    `enable_thinking` (Qwen3 and the templates that copy it) and `reasoning_effort`
    (gpt-oss). A job that names no effort, or a template that reads neither variable (a
    model that does not reason, or cannot be told), gets none: it is asked nothing. The
    request's own template variables (chat_template_kwargs) are added, and win."""
    effort = job.reasoning_effort
    source = str(template or "")
    switches: dict[str, Any] = {}
    if not effort:
        return dict(job.template_kwargs)
    if "enable_thinking" in source:
        switches["enable_thinking"] = effort != "none"
    if "reasoning_effort" in source and effort in _HARMONY_LEVELS:
        switches["reasoning_effort"] = _HARMONY_LEVELS[effort]
    return {**switches, **job.template_kwargs}  # what the request names itself wins


def knows_tools(template: str | None) -> bool:
    return bool(template) and "tools" in str(template)


def tool_format(template: str | None, options: dict[str, Any]) -> str:
    """The model's call format: the catalogue entry's `tool_format` option, or the one its
    template writes, or Hermes (which the fallback prompt asks for)."""
    chosen = options.get("tool_format")
    if chosen is not None:
        if chosen not in FORMATS:
            raise JobError(f"tool_format must be one of {', '.join(FORMATS)}", kind="bad_model")
        return str(chosen)
    source = str(template or "") if knows_tools(template) else ""
    if _is_harmony(source):
        return "harmony"
    probed = _probed(source).tool_format if source else None
    if probed is not None:  # what the template renders of a call
        return probed
    # what it does not render (it raised on the probe): the markers in its source
    if "<tool_call>" in source and "<function=" in source and "<parameter=" in source:
        return "qwen3_coder"
    if "<tool_call>" in source and "<arg_key>" in source:
        return "glm45"
    if MARKERS["kimi_k2"].section in source:
        return "kimi_k2"
    # DeepSeek-V3 and R1 write `function`, the name and fenced JSON between the same
    # markers: not this format
    if MARKERS["deepseek_v31"].section in source and "```json" not in source:
        return "deepseek_v31"
    if "[TOOL_CALLS]" in source:
        return "mistral"
    if "<|python_tag|>" in source or "ipython" in source:
        return "llama3"
    return "hermes"


def reasoning_format(template: str | None, options: dict[str, Any]) -> str:
    """How the model writes its reasoning (reasoning.REASONING_FORMATS): the catalogue
    entry's `reasoning_format` option, or `think` where its template knows `<think>`, else
    `none` (its output is all answer); `harmony` for gpt-oss's channels. DeepSeek-R1's own
    template names only `</think>`."""
    chosen = options.get("reasoning_format")
    if chosen is not None:
        if chosen not in REASONING_FORMATS:
            raise JobError(
                f"reasoning_format must be one of {', '.join(REASONING_FORMATS)}", kind="bad_model"
            )
        return str(chosen)
    source = str(template or "")
    if _is_harmony(source):
        return "harmony"
    if source and _probed(source).think_tags is not None:  # it renders thinking in tags
        return "think"
    return "think" if START in source or END in source else "none"


def tags(template: str | None) -> tuple[tuple[str, str], tuple[str, str]]:
    """The tags of the model's Hermes-like calls and of its thinking: those its template
    renders (a family's own), else `<tool_call>` and `<think>`'s."""
    source = str(template or "")
    probed = _probed(source) if source else Probed()
    calls = probed.call_tags if knows_tools(source) and probed.call_tags else CALL_TAGS
    return calls, probed.think_tags or (START, END)


@functools.lru_cache(maxsize=16)
def _probed(source: str) -> Probed:
    return probe(source, template_input)


def _is_harmony(source: str) -> bool:
    """gpt-oss's template writes messages in channels (harmony.py)."""
    return "<|channel|>" in source and "<|message|>" in source


def _arguments(text: Any) -> Any:
    """Templates write arguments with tojson: an object, where the client sent a string."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def mistral_id(call_id: str) -> str:
    """Mistral's templates accept only 9-character alphanumeric call ids: ours, mapped so
    that a call and its result still match."""
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def _native(message: dict[str, Any], mistral: bool) -> dict[str, Any]:
    out = dict(message)
    if mistral and out.get("tool_call_id"):
        out["tool_call_id"] = mistral_id(out["tool_call_id"])
    calls = out.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                **call,
                "id": mistral_id(call["id"]) if mistral else call["id"],
                "function": {
                    **call["function"],
                    "arguments": _arguments(call["function"]["arguments"]),
                },
            }
            for call in calls
        ]
    return out


def _fallback(message: dict[str, Any]) -> dict[str, Any]:
    role = message["role"]
    content = message.get("content") or ""
    if role == "tool":
        return {"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"}
    calls = message.get("tool_calls")
    if calls:
        written = "".join(
            "<tool_call>\n"
            + json.dumps(
                {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}
            )
            + "\n</tool_call>"
            for c in calls
        )
        content = f"{content}\n{written}" if content else written
    out = {"role": role, "content": content}
    if message.get("reasoning_content"):  # the template places it or drops it
        out["reasoning_content"] = message["reasoning_content"]
    return out


def harmony_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as gpt-oss's template takes them. It reads an earlier turn's reasoning as
    `thinking`, renders one call per assistant message (harmony has no parallel calls:
    each call is a turn, its result follows it), names a result by the call before it, and
    refuses a call message with both content and thinking (it would write either as the
    same analysis message: they are joined). A call's result is the first of the tool
    messages right after its turn with its id (clients that number ids reuse them)."""
    placed: set[int] = set()
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if message["role"] == "tool":
            if i not in placed:  # a result whose call is not in the history
                placed.add(i)
                out.append(message)
            continue
        message = dict(message)
        if message.get("reasoning_content"):
            message["thinking"] = message["reasoning_content"]
        calls = message.get("tool_calls") or []
        if message["role"] != "assistant" or not calls:
            out.append(message)
            continue
        if message.get("content") and message.get("thinking"):
            message["thinking"] = f"{message['thinking']}\n\n{message['content']}"
            message["content"] = ""
        for n, call in enumerate(calls):
            turn = {**message, "tool_calls": [call]}
            if n:  # the reasoning and text came before the first call
                turn = {"role": "assistant", "content": "", "tool_calls": [call]}
            out.append(turn)
            result = _result_of(messages, i, call.get("id"), placed)
            if result is not None:
                placed.add(result)
                out.append(messages[result])
    return out


def _result_of(
    messages: list[dict[str, Any]], turn: int, call_id: Any, placed: set[int]
) -> int | None:
    """The index of the first unplaced result of a call among the tool messages that
    follow its turn."""
    for k in range(turn + 1, len(messages)):
        if messages[k]["role"] != "tool":
            return None
        if k not in placed and messages[k].get("tool_call_id") == call_id:
            return k
    return None


def template_input(job: Job, template: str | None) -> tuple[list[dict[str, Any]], list[Any] | None]:
    """(messages, tools) for the template."""
    if knows_tools(template):
        mistral = "[TOOL_CALLS]" in str(template)
        native = [_native(m, mistral) for m in job.messages]
        if _is_harmony(str(template)):
            native = harmony_turns(native)
        return native, (job.tools or None)
    messages: list[dict[str, Any]] = []
    for message in job.messages:
        rewritten = _fallback(message)
        # parallel calls' results: one user turn, for templates that want turns to alternate
        if message["role"] == "tool" and messages and messages[-1].get("results"):
            messages[-1]["content"] += "\n" + rewritten["content"]
            continue
        messages.append({**rewritten, "results": True} if message["role"] == "tool" else rewritten)
    messages = [{k: v for k, v in m.items() if k != "results"} for m in messages]
    if job.tools and job.tool_choice != "none":
        listed = "\n".join(
            json.dumps(t.get("function", t), separators=(",", ":")) for t in job.tools
        )
        prompt = FALLBACK_PROMPT.format(tools=listed)
        if messages and messages[0]["role"] == "system":
            messages[0] = {"role": "system", "content": f"{messages[0]['content']}\n\n{prompt}"}
        else:
            messages.insert(0, {"role": "system", "content": prompt})
    return messages, None
