"""Which prefix a new prompt may start from on windowed and recurrent models: the decisions
of coderai/engine/backends/llamacpp/checkpoints.py, on positions as llama.cpp reports them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coderai.engine.backends.llamacpp.checkpoints import (
    Checkpoint,
    Held,
    Memory,
    due,
    latest,
    reusable,
    whole,
)
from coderai.engine.backends.llamacpp.prefix_cache import PrefixCache

WINDOW = 512


def test_a_full_attention_model_reuses_any_prefix_it_holds() -> None:
    held = Held(0, 3000)
    assert reusable(1200, held, Memory.FULL, 0, []) == (1200, None)
    assert reusable(3000, held, Memory.FULL, 0, []) == (3000, None)


def test_a_window_that_has_slid_serves_only_prefixes_whose_window_it_still_holds() -> None:
    held = Held(2300, 3000)  # positions 2300..2999 are held, the window slid past the rest
    assert reusable(2900, held, Memory.WINDOW, WINDOW, []) == (2900, None)
    assert reusable(2300 + WINDOW, held, Memory.WINDOW, WINDOW, []) == (2300 + WINDOW, None)
    # the window before 2500 begins below 2300: its cells are gone
    assert reusable(2500, held, Memory.WINDOW, WINDOW, []) == (0, None)


def test_a_window_that_never_slid_serves_every_prefix() -> None:
    assert reusable(100, Held(0, 3000), Memory.WINDOW, WINDOW, []) == (100, None)


def test_a_checkpoint_serves_a_prefix_the_held_window_does_not() -> None:
    held = Held(2300, 3000)
    assert reusable(2500, held, Memory.WINDOW, WINDOW, [1024, 2048]) == (2048, 2048)
    # a checkpoint past the shared tokens holds state of tokens the prompt does not have
    assert reusable(2000, held, Memory.WINDOW, WINDOW, [2048]) == (0, None)


def test_a_recurrent_state_serves_only_the_whole_sequence_else_a_checkpoint() -> None:
    held = Held(2999, 3000)
    assert reusable(3000, held, Memory.RECURRENT, 0, []) == (3000, None)
    assert reusable(2999, held, Memory.RECURRENT, 0, []) == (0, None)
    assert reusable(2999, held, Memory.RECURRENT, 0, [1000, 2600]) == (2600, 2600)


@given(
    first=st.integers(0, 4000), length=st.integers(1, 4000), common=st.integers(0, 8000),
    window=st.integers(1, 1024), points=st.lists(st.integers(1, 8000), max_size=8),
    memory=st.sampled_from(list(Memory)),
)  # fmt: skip
def test_what_is_reused_is_always_held_whole_or_a_checkpoint(
    first: int, length: int, common: int, window: int, points: list[int], memory: Memory
) -> None:
    """Never more than the prompt shares, and never a prefix whose state is neither held
    whole nor checkpointed: the property that keeps every answer equal to cold."""
    held = Held(first, first + length)
    n, point = reusable(common, held, memory, window, points)
    assert 0 <= n <= common
    if point is None:
        assert whole(n, held, memory, window)
    else:
        assert point == n and point in points


def test_checkpoints_fall_before_the_prompts_last_token_and_every_so_many_tokens() -> None:
    assert due(4096, 10_000, [], 4096)
    assert not due(4000, 10_000, [], 4096)
    assert due(8200, 10_000, [4096], 4096)
    assert not due(8000, 10_000, [4096], 4096)
    assert due(9_999, 10_000, [8200], 4096)  # before the last prompt token, however close
    assert not due(9_999, 10_000, [9_999], 4096)  # once
    assert not due(10_000, 10_000, [], 4096)  # the last token's own: a resend cannot use it


def test_a_sequence_keeps_its_latest_checkpoints() -> None:
    points = [Checkpoint(n, b"") for n in (1, 2, 3, 4)]
    assert [c.tokens for c in latest(points, 2)] == [3, 4]
    assert latest(points, 0) == []


def test_the_prefix_cache_takes_the_entry_that_can_give_the_most() -> None:
    """The entry sharing the most tokens is not the best when its window has slid past
    them: the match is on what each entry can give."""
    cache = PrefixCache(10_000, 4)
    long_ago = list(range(3000))
    recent = [*range(2000), *[-1] * 200]
    cache.add(1, long_ago)
    cache.add(2, recent)
    prompt = [*range(2500), -2]
    assert cache.match(prompt) == (1, 2500)
    gives = {1: 0, 2: 2000}
    assert cache.match(prompt, lambda seq_id, common: min(common, gives[seq_id])) == (2, 2000)
