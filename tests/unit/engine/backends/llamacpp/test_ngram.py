"""Prompt-lookup drafts (coderai/engine/backends/llamacpp/ngram.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coderai.engine.backends.llamacpp.ngram import NgramIndex


def test_the_tokens_after_the_latest_earlier_occurrence_of_the_longest_ngram() -> None:
    tokens = [1, 2, 3, 4, 9, 9, 1, 2, 3, 5, 6, 7, 8, 1, 2, 3]
    # [1, 2, 3] last occurred before the end at index 6; 5, 6 followed it
    assert NgramIndex().draft(tokens, 2) == [5, 6]
    assert NgramIndex().draft(tokens, 10) == [5, 6, 7, 8, 1, 2, 3]


def test_no_draft_without_an_earlier_occurrence() -> None:
    assert NgramIndex().draft([1, 2, 3, 4], 4) == []
    assert NgramIndex().draft([1, 2, 3, 4, 3, 4], 0) == []


def test_the_index_grows_with_the_sequence() -> None:
    index = NgramIndex()
    tokens = [7, 8, 9]
    assert index.draft(tokens, 4) == []
    tokens += [1, 7, 8]
    assert index.draft(tokens, 4) == [9, 1, 7, 8]


@given(st.lists(st.integers(0, 5), max_size=60), st.integers(1, 8))
def test_a_draft_is_what_followed_an_earlier_occurrence_of_the_ending(
    tokens: list[int], most: int
) -> None:
    draft = NgramIndex().draft(tokens, most)
    assert len(draft) <= most
    if draft:
        n = len(tokens)
        found = any(
            tokens[s : s + size] == tokens[n - size :]
            and tokens[s + size : s + size + len(draft)] == draft
            for size in (2, 3, 4)
            for s in range(n - size)
        )
        assert found
