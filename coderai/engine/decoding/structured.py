"""Structured output for one sequence: the grammar on its logits, the parser that splits its
text into content and tool calls, and its log-probabilities. The scheduler calls `prepare`
when a sequence starts and `read` with each piece of text; backends call `constrain` before
sampling and `sampled` after.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from coderai.bus.kinds import JobKind
from coderai.common import grammar
from coderai.engine.decoding.bare_call import BareCallReader
from coderai.engine.decoding.call_check import CallCheck
from coderai.engine.decoding.call_grammar import (
    LAZY_OWN,
    OWN_FORMATS,
    lazy_own_grammar,
    own_grammar,
)
from coderai.engine.decoding.constraint import Constraint
from coderai.engine.decoding.harmony import ENDS, MESSAGE, HarmonyReader
from coderai.engine.decoding.reasoning import ReasoningSplitter, Split
from coderai.engine.decoding.tool_parse import Parsed, ToolCallParser
from coderai.errors import JobError

if TYPE_CHECKING:  # backends call into this module: at run time it imports none of them
    from coderai.engine.backends.base import ModelInstance, Sequence

log = logging.getLogger("coderai.engine")


def _constraint(instance: ModelInstance, grammar_text: str) -> Constraint:
    tokenizer = instance.grammar_tokenizer()
    if tokenizer is None:
        raise JobError("this model cannot constrain its output", kind="unsupported")
    return Constraint(tokenizer, grammar_text)


def _tool(job_tools: list[Any], name: str) -> dict[str, Any]:
    for tool in job_tools:
        if tool.get("function", {}).get("name") == name:
            return dict(tool)
    raise JobError(f"tool_choice names {name!r}, which is not among the tools", kind="bad_request")


def prepare(seq: Sequence, instance: ModelInstance) -> None:
    """Set up a starting sequence's grammar and parser from its job."""
    job = seq.job
    try:
        if job.response_format:
            seq.constraint = _constraint(instance, grammar.response_grammar(job.response_format))
        # gpt-oss: one reader splits its channels into reasoning, content and calls
        harmony = job.kind == JobKind.CHAT and "harmony" in (
            instance.tool_format,
            instance.reasoning_format,
        )
        if not job.tools or job.tool_choice == "none":
            pass
        elif job.tool_choice in ("required", "function") and _own_format(seq, instance):
            pass  # the call in the model's own format, its reasoning first
        elif job.tool_choice == "required":
            seq.parser = ToolCallParser("calls")
            text = grammar.required_grammar(job.tools, job.parallel_tool_calls)
            seq.constraint = _constraint(instance, text)
        elif job.tool_choice == "function":
            seq.parser = ToolCallParser("arguments", name=job.tool_name)
            seq.constraint = _constraint(
                instance, grammar.named_grammar(_tool(job.tools, job.tool_name))
            )
        elif harmony:
            seq.parser = HarmonyReader(calls=True, single=not job.parallel_tool_calls)
        else:
            single = not job.parallel_tool_calls
            seq.parser = ToolCallParser(
                "auto",
                instance.tool_format,
                single=single,
                tools=job.tools,
                tags=instance.call_tags,
            )
            seq.call_check = CallCheck(job.tools)
            bare = job.model.get("options", {}).get("bare_tool_calls", True)
            if not isinstance(bare, bool):
                raise JobError("bare_tool_calls must be true or false", kind="bad_model")
            if bare:
                # a call written without its tags (Qwen2.5-Coder's habit): bare_call.py
                seq.parser = BareCallReader(seq.parser, job.tools)
            seq.render_special = True
        if harmony and seq.parser is None and seq.constraint is None:
            seq.parser = HarmonyReader(calls=False)  # its reasoning is still read apart
        seq.render_special = seq.render_special or isinstance(seq.parser, HarmonyReader)
    except grammar.GrammarError as exc:
        raise JobError(f"the schema cannot be compiled: {exc}", kind="bad_request") from None
    # a JSON grammar from the first token (a response format, or a required call where
    # the model's own format has no grammar) writes no thinking, even where the template
    # opened it; a call in the model's own format may follow thinking
    think = instance.reasoning_format == "think" and not isinstance(seq.parser, HarmonyReader)
    free = seq.constraint is None or seq.own_format
    if job.kind == JobKind.CHAT and think and free:
        seq.reasoning = ReasoningSplitter(inside=seq.opened, tags=instance.think_tags)
        if seq.opened and job.thinking_budget == 0:  # no thinking at all: it ends at once
            seq.forced = instance.marker_ids(seq.reasoning.end)
            seq.budget_forced = 1
    if job.logprobs:
        seq.logprobs = []


#: harmony's way out of thinking when another analysis follows a forced end: the answer
_HARMONY_FINAL = f"{ENDS[0]}<|start|>assistant<|channel|>final{MESSAGE}"


def _own_format(seq: Sequence, instance: ModelInstance) -> bool:
    """A required or named call under a grammar of the model's own call format (its
    reasoning free before it), read by that format's parser; False where the model
    cannot be given one (the JSON grammar then writes the call)."""
    job = seq.job
    tokenizer = instance.grammar_tokenizer()
    if tokenizer is None or instance.tool_format not in OWN_FORMATS:
        return False
    required = job.tool_choice == "required"
    tools = job.tools if required else [_tool(job.tools, job.tool_name)]
    parallel = required and job.parallel_tool_calls
    harmony = "harmony" in (instance.tool_format, instance.reasoning_format)
    think = "harmony" if harmony else ""
    if instance.reasoning_format == "think":
        think = "opened" if seq.opened else "think"

    special = _special_of(instance, tokenizer)
    try:
        text = own_grammar(tools, instance.tool_format, special, parallel, think,
                           instance.call_tags, instance.think_tags)  # fmt: skip
        constraint = Constraint(tokenizer, grammar.lark_grammar(text))
    except Exception as exc:  # a grammar of ours it cannot take: the JSON one writes the call
        log.warning("job %d: no grammar in the model's own format: %s", job.job_id, exc)
        return False
    seq.constraint, seq.own_format = constraint, True
    if harmony:
        seq.parser = HarmonyReader(calls=True, single=not parallel)
    else:
        seq.parser = ToolCallParser("auto", instance.tool_format, single=not parallel,
                                    tools=job.tools, tags=instance.call_tags)  # fmt: skip
    seq.render_special = True
    return True


def _special_of(instance: ModelInstance, tokenizer: Any) -> Any:
    """A marker's token id where the vocabulary holds it as one special token."""

    def special(marker: str) -> int | None:
        ids = instance.marker_ids(marker)
        return ids[0] if len(ids) == 1 and tokenizer.is_special_token(ids[0]) else None

    return special


def budget(seq: Sequence) -> None:
    """A thinking budget spent: the reasoning model's end marker is forced, once
    (`</think>`), whatever the logits say. Harmony's `<|end|>` lets gpt-oss write its next
    message's header itself (it may call a tool); if it opens another analysis, or has no
    tool to call, the final channel is forced too. A model that does not reason, or whose
    marker never shows in its text, is not forced again."""
    if seq.forced or (seq.constraint is not None and not seq.own_format):
        return  # a JSON grammar from the first token: no thinking under it
    if isinstance(seq.reasoning, ReasoningSplitter):
        if seq.budget_forced or not seq.reasoning.reasoning:
            return
        marker = seq.reasoning.end
    elif isinstance(seq.parser, HarmonyReader):
        if seq.budget_forced >= 2 or not seq.parser.thinking:
            return
        marker = ENDS[0] if not seq.budget_forced and seq.parser.offers_calls else _HARMONY_FINAL
    else:
        return
    if seq.reasoning_tokens >= seq.job.thinking_budget and seq.instance is not None:
        seq.forced = seq.instance.marker_ids(marker)
        seq.budget_forced += 1


def may_draft(seq: Sequence) -> bool:
    """Whether a draft may run ahead of the sequence: not while a thinking budget may be
    reached within it (the budget is checked a token at a time)."""
    if seq.forced:
        return False
    if seq.job.thinking_budget < 0:
        return True
    return isinstance(seq.reasoning, ReasoningSplitter) and seq.reasoning.state == "after"


def split(seq: Sequence, text: str, end: bool = False) -> Split:
    """Reasoning and answer out of a piece of a reasoning model's text (after stop
    sequences); at the end, what the splitter held back too."""
    splitter: ReasoningSplitter = seq.reasoning
    out = splitter.feed(text) if text else Split()
    if end:
        tail = splitter.finish()
        out.reasoning += tail.reasoning
        out.content += tail.content
    return out


def read(seq: Sequence, text: str, end: bool = False) -> Parsed:
    """Split text (after stop sequences) into content and calls; begin a lazy grammar
    where the model began a call."""
    parser: ToolCallParser = seq.parser
    out = parser.feed(text) if text else Parsed()
    if end:  # what the parser held: text, a call's last arguments, a reader's reasoning
        tail = parser.finish()
        out.content += tail.content
        out.reasoning += tail.reasoning
        out.calls += tail.calls
    if seq.call_check is not None:
        for delta in out.calls:
            seq.call_check.add(delta.index, delta.name, delta.arguments)
        if end:
            for problem in seq.call_check.problems():
                log.info("job %d: %s (returned as written: the client validates)",
                         seq.job.job_id, problem)  # fmt: skip
    if out.began is not None and seq.constraint is None and seq.instance is not None:
        try:
            _begin_lazy(seq, seq.instance, out.began)
        except Exception:  # a grammar that cannot be built leaves the call as the model writes it
            log.exception("job %d: no grammar for the call it began", seq.job.job_id)
    return out


def _begin_lazy(seq: Sequence, instance: ModelInstance, began: str) -> None:
    if instance.grammar_tokenizer() is None:
        return  # the fake model: its text is what it is
    fmt = instance.tool_format
    if fmt in grammar.LAZY_FORMATS:  # JSON bodies: whatever tags are around them
        text = grammar.lazy_grammar(seq.job.tools, fmt)
    elif fmt in LAZY_OWN:
        tokenizer = instance.grammar_tokenizer()
        special = _special_of(instance, tokenizer)
        lark = lazy_own_grammar(seq.job.tools, fmt, special, seq.job.parallel_tool_calls)
        text = grammar.lark_grammar(lark)
    else:
        return  # harmony's calls, and tags of a family's own: parsed as written
    constraint = _constraint(instance, text)
    if not constraint.accept_text(began):
        # the model's start already breaks the grammar (a tool that does not exist): the
        # call is parsed as written, and the client validates it
        log.info("job %d: a call began outside the grammar: %r", seq.job.job_id, began[:80])
        return
    if constraint.accepting:  # the text read holds the whole call already: nothing to do
        return
    seq.constraint, seq.lazy = constraint, True


def constrain_numpy(seq: Sequence, logits: Any) -> None:
    if seq.constraint is not None:
        seq.constraint.mask_numpy(logits)


def constrain_torch(seq: Sequence, logits: Any) -> None:
    if seq.constraint is not None:
        seq.constraint.mask_torch(logits)


def sampled(seq: Sequence, token: int) -> None:
    """Feed the grammar the token sampled; a lazy grammar ends with its call."""
    constraint: Constraint | None = seq.constraint
    if constraint is None:
        return
    constraint.accept(token)
    if seq.lazy and constraint.accepting:
        seq.constraint, seq.lazy = None, False


def logprob_entry(logprobs: Any, token: int, top: int, piece: Any) -> list[Any]:
    """[bytes, logprob, [[bytes, logprob], ...]] for the chosen token and the `top` likeliest
    (a float32 numpy row of log-probabilities; piece(id) -> bytes)."""
    import numpy as np

    chosen = float(logprobs[token])
    alternatives: list[list[Any]] = []
    if top:
        best = np.argpartition(-logprobs, top)[:top]
        best = best[np.argsort(-logprobs[best])]
        alternatives = [[piece(int(i)), _finite(float(logprobs[i]))] for i in best]
    return [piece(token), _finite(chosen), alternatives]


def _finite(value: float) -> float:
    """OpenAI's floor for an impossible token: JSON has no -Infinity."""
    return value if math.isfinite(value) else -9999.0


def log_softmax(row: Any) -> Any:
    import numpy as np

    top = np.max(row)
    shifted = row - top
    return shifted - np.log(np.sum(np.exp(shifted)))
