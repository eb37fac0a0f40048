"""A reasoning model's thinking apart from its answer, however the text is cut; where a
prompt leaves `<think>` open; and which models reason."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coderai.engine.decoding.chat_template import reasoning_format
from coderai.engine.decoding.reasoning import ReasoningSplitter, opens_reasoning
from coderai.errors import JobError
from tests.unit.engine.decoding.test_tool_parse import cuts


def split(pieces: list[str], inside: bool = False) -> tuple[str, str]:
    splitter = ReasoningSplitter(inside)
    reasoning = content = ""
    for piece in pieces:
        out = splitter.feed(piece)
        reasoning, content = reasoning + out.reasoning, content + out.content
    tail = splitter.finish()
    return reasoning + tail.reasoning, content + tail.content


QWEN3 = "<think>\nThe user wants Paris. </think> is a tag.\n</think>\n\nIt is sunny <think> here."


@pytest.mark.parametrize("pieces", cuts(QWEN3))
def test_a_leading_think_block_is_reasoning_and_the_rest_is_answer(pieces: list[str]) -> None:
    assert split(pieces) == (
        "The user wants Paris.",
        "is a tag.\n</think>\n\nIt is sunny <think> here.",
    )


@given(st.lists(st.integers(min_value=1, max_value=len(QWEN3) - 1), max_size=10))
def test_any_cut_gives_the_same_split(points: list[int]) -> None:
    marks = sorted({0, *points, len(QWEN3)})
    assert split([QWEN3[a:b] for a, b in itertools.pairwise(marks)]) == split([QWEN3])


@pytest.mark.parametrize("pieces", cuts("\nThinking it over.\n</think>\n\nSunny."))
def test_a_prompt_that_opened_think_starts_inside_it(pieces: list[str]) -> None:
    assert split(pieces, inside=True) == ("Thinking it over.", "Sunny.")


@pytest.mark.parametrize("pieces", cuts("<think>\nHm.\n\n</think>Sunny."))
def test_a_think_the_model_writes_where_its_template_opened_one_is_not_reasoning(
    pieces: list[str],
) -> None:
    assert split(pieces, inside=True) == ("Hm.", "Sunny.")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  Just an answer.", ("", "  Just an answer.")),  # no reasoning: all as written
        ("<thi", ("", "<thi")),  # a marker never finished is answer
        ("<think>cut off mid-thought</thi", ("cut off mid-thought</thi", "")),
        ("<think></think>", ("", "")),
        ("\n\n", ("", "\n\n")),
    ],
)
def test_edges(text: str, expected: tuple[str, str]) -> None:
    for pieces in cuts(text):
        assert split(pieces) == expected


def test_the_splitter_says_while_it_reads_reasoning() -> None:
    splitter = ReasoningSplitter()
    assert not splitter.reasoning
    splitter.feed("<think>hm")
    assert splitter.reasoning
    splitter.feed("</think>ok")
    assert not splitter.reasoning


def test_an_open_think_at_the_prompts_end_is_found() -> None:
    # DeepSeek-R1's template ends its prompt inside <think>
    assert opens_reasoning("<\uff5cUser\uff5c>hi<\uff5cAssistant\uff5c><think>\n")
    # Qwen3's with enable_thinking false writes an empty block: the answer comes next
    assert not opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # an earlier turn's reasoning, closed
    assert not opens_reasoning("<think>a</think>b<|im_start|>assistant\n")
    # a message about the tag opens nothing: only the prompt's end counts
    assert not opens_reasoning("user: why does <think> break my parser?\nassistant:")


def test_which_models_reason() -> None:
    assert reasoning_format("{% if x %}<think>{% endif %}", {}) == "think"
    assert reasoning_format("{{ messages }}", {}) == "none"
    # DeepSeek-R1's template names only the end (it drops earlier turns' thinking)
    assert reasoning_format("{{ content.split('</think>')[-1] }}", {}) == "think"
    assert reasoning_format(None, {"reasoning_format": "think"}) == "think"
    assert reasoning_format("<think>", {"reasoning_format": "none"}) == "none"
    with pytest.raises(JobError, match="reasoning_format must be one of think, harmony, none"):
        reasoning_format(None, {"reasoning_format": "xml"})
