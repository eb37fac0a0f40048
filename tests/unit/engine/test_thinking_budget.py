"""When a thinking budget forces the end of thinking, and what: once per answer for
`<think>`, `<|end|>` then harmony's final channel for gpt-oss, never while a draft could
run past it."""

from __future__ import annotations

from coderai.bus.messages import Job
from coderai.engine.backends.base import Sequence
from coderai.engine.backends.fake import FakeInstance
from coderai.engine.decoding import structured
from coderai.engine.decoding.harmony import HarmonyReader
from coderai.engine.decoding.reasoning import ReasoningSplitter


def thinking(budget: int, reader: object) -> Sequence:
    seq = Sequence(Job(1, {}, "chat", thinking_budget=budget))
    seq.instance = FakeInstance({})
    if isinstance(reader, ReasoningSplitter):
        seq.reasoning = reader
    else:
        seq.parser = reader
    return seq


def text_of(ids: list[int]) -> str:
    return bytes(ids).decode()


def test_think_is_ended_once_when_the_budget_is_spent() -> None:
    seq = thinking(2, ReasoningSplitter(inside=True))
    seq.reasoning.feed("one")
    seq.reasoning_tokens = 1
    structured.budget(seq)
    assert seq.forced == [] and not structured.may_draft(seq)
    seq.reasoning_tokens = 2
    structured.budget(seq)
    assert text_of(seq.forced) == "</think>"
    seq.forced = []  # chosen, but the model's text never showed it: not forced again
    seq.reasoning_tokens = 9
    structured.budget(seq)
    assert seq.forced == []
    seq.reasoning.feed("</think>answer")
    assert structured.may_draft(seq)


def test_harmony_ends_the_analysis_then_forces_the_final_channel() -> None:
    reader = HarmonyReader(calls=True)
    seq = thinking(1, reader)
    reader.feed("<|channel|>analysis<|message|>hm")
    seq.reasoning_tokens = 1
    structured.budget(seq)
    assert text_of(seq.forced) == "<|end|>"  # it may call a tool next
    seq.forced = []
    reader.feed("<|end|><|start|>assistant<|channel|>analysis<|message|>more")
    structured.budget(seq)
    assert text_of(seq.forced) == "<|end|><|start|>assistant<|channel|>final<|message|>"
    seq.forced = []
    reader.feed("<|end|><|start|>assistant<|channel|>analysis<|message|>again")
    structured.budget(seq)
    assert seq.forced == []  # twice is enough: the length limit ends the rest


def test_harmony_without_tools_goes_straight_to_the_answer() -> None:
    reader = HarmonyReader(calls=False)
    seq = thinking(0, reader)
    reader.feed("<|channel|>analysis<|message|>x")
    structured.budget(seq)
    assert text_of(seq.forced).endswith("<|channel|>final<|message|>")


def test_no_budget_forces_nothing_and_drafts_freely() -> None:
    seq = thinking(-1, ReasoningSplitter(inside=True))
    seq.reasoning_tokens = 10**6
    assert structured.may_draft(seq)
