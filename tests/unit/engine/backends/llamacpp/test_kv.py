import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coderai.catalogue.model_memory import bytes_per_token, context_for_memory
from coderai.engine.backends.llamacpp.kv import KvLedger, cells_needed, grown, reservation


def test_a_bounded_request_is_promised_all_it_can_use_and_an_unbounded_one_a_step() -> None:
    need = cells_needed(prompt=100, limit=50)
    assert need == 149  # the last sampled token is never decoded
    assert reservation(100, need, bounded=True, step=16) == 149
    assert reservation(100, need, bounded=False, step=16) == 116
    assert reservation(140, need, bounded=False, step=16) == 149  # never past the need


def test_growth_stops_at_the_need() -> None:
    assert grown(116, 149, 16) == 132
    assert grown(140, 149, 16) == 149


def test_the_ledger_promises_no_more_cells_than_it_has() -> None:
    ledger = KvLedger(100)
    assert ledger.reserve(1, 60)
    assert not ledger.reserve(2, 41)
    assert ledger.reserve(2, 40) and ledger.free() == 0
    assert ledger.reserve(1, 30)  # shrinking always fits
    assert ledger.reserve(2, 70) and ledger.free() == 0
    ledger.release(1)
    assert (ledger.reserved, ledger.promised(1), ledger.free()) == (70, 0, 30)


def test_kv_bytes_per_token_come_from_the_gguf_metadata() -> None:
    # SmolLM2-135M: 30 layers, 9 heads of 64, 3 KV heads
    meta = {"general.architecture": "llama", "llama.block_count": "30",
            "llama.attention.head_count": "9", "llama.attention.head_count_kv": "3",
            "llama.embedding_length": "576"}  # fmt: skip
    assert bytes_per_token(meta, 2) == 30 * 3 * (64 + 64) * 2
    assert bytes_per_token({}, 2) == 0
    # a GGUF that does not name its architecture is read as llama's
    unnamed = {k: v for k, v in meta.items() if k != "general.architecture"}
    assert bytes_per_token(unnamed, 2) == 30 * 3 * (64 + 64) * 2


def test_the_context_is_the_trained_one_as_far_as_memory_allows() -> None:
    assert context_for_memory(8192, 1000, 10**9, floor=2048) == 8192
    assert context_for_memory(131072, 1000, 10**7, floor=2048) == 10_000
    assert context_for_memory(131072, 1000, 10**5, floor=2048) == 2048
    assert context_for_memory(512, 1000, 10, floor=2048) == 512
    assert context_for_memory(4096, 0, 10, floor=2048) == 4096


def test_a_quantized_cache_takes_its_blocks_bytes_per_token() -> None:
    meta = {"general.architecture": "llama", "llama.block_count": "30",
            "llama.attention.head_count": "9", "llama.attention.head_count_kv": "3",
            "llama.embedding_length": "576"}  # fmt: skip
    f16 = bytes_per_token(meta, 2)
    assert bytes_per_token(meta, 34 / 32) == round(f16 * 17 / 32)  # q8_0
    assert bytes_per_token(meta, 18 / 32) == round(f16 * 9 / 32)  # q4_0


def test_cells_a_sequence_shares_with_its_base_are_counted_once() -> None:
    ledger = KvLedger(100)
    assert ledger.reserve(1, 60)  # a system prompt, a prefix entry
    ledger.share(2, 1, 50)  # an agent starts from its first 50 cells
    assert (ledger.promised(2), ledger.cost(2), ledger.reserved) == (50, 0, 60)
    assert ledger.reserve(2, 80)  # and adds 30: 60 + 30 fit where 60 + 80 would not
    assert (ledger.cost(2), ledger.free()) == (30, 10)
    assert not ledger.reserve(2, 91)
    ledger.release(2)
    assert (ledger.reserved, ledger.base(2)) == (60, None)


def test_when_a_base_goes_the_one_sharing_most_holds_its_cells() -> None:
    ledger = KvLedger(100)
    assert ledger.reserve(1, 40)
    ledger.share(2, 1, 30)
    assert ledger.reserve(2, 35)
    ledger.share(3, 1, 20)
    assert ledger.reserve(3, 25)
    assert ledger.reserved == 40 + 5 + 5
    ledger.release(1)  # its cells 30..40 go; 0..30 stay, held by 2; 3 shares with 2
    assert (ledger.base(2), ledger.base(3)) == (None, (2, 20))
    assert ledger.reserved == 35 + 5
    ledger.release(2)  # 3 holds its 20 shared cells itself now
    assert (ledger.base(3), ledger.reserved, ledger.cost(3)) == (None, 25, 25)


def test_an_heir_keeps_sharing_with_the_base_of_the_one_that_went() -> None:
    ledger = KvLedger(100)
    assert ledger.reserve(1, 50)
    ledger.share(2, 1, 40)
    assert ledger.reserve(2, 60)
    ledger.share(3, 2, 55)
    assert ledger.reserve(3, 70)
    assert ledger.reserved == 50 + 20 + 15
    ledger.release(2)  # 3 takes 2's cells 40..55 over; 0..40 are still 1's
    assert (ledger.base(3), ledger.cost(3), ledger.reserved) == ((1, 40), 30, 80)


def test_changes_can_be_tried_on_a_copy() -> None:
    ledger = KvLedger(100)
    assert ledger.reserve(1, 60)
    trial = ledger.copy()
    trial.share(2, 1, 60)
    trial.release(1)
    assert trial.reserve(2, 100) and (trial.base(2), trial.free()) == (None, 0)
    assert (ledger.free(), ledger.promised(2)) == (40, 0)


@given(st.lists(st.tuples(st.sampled_from(["new", "share", "grow", "release"]),
                          st.integers(0, 5), st.integers(0, 5), st.integers(1, 40)),
                max_size=60))  # fmt: skip
def test_the_ledger_counts_exactly_the_cells_the_owners_hold_between_them(
    ops: list[tuple[str, int, int, int]],
) -> None:
    """Against a model of the cache's cells: each owner holds as many cells as it is
    promised, the first ones of a sharing owner being its base's very cells. Whatever the
    owners do, what the ledger counts as reserved is the number of distinct cells."""
    ledger = KvLedger(10_000)
    cells: dict[int, list[int]] = {}  # owner -> the cells it holds, in position order
    fresh = itertools.count()

    def check() -> None:
        held = {c for owned in cells.values() for c in owned}
        assert ledger.reserved == len(held)
        assert all(ledger.promised(o) == len(owned) for o, owned in cells.items())

    for op, owner, other, count in ops:
        if op == "new" and owner not in cells:
            assert ledger.reserve(owner, count)
            cells[owner] = [next(fresh) for _ in range(count)]
        elif op == "share" and owner not in cells and other in cells and other != owner:
            shared = min(count, len(cells[other]))
            ledger.share(owner, other, shared)
            cells[owner] = cells[other][:shared]
        elif op == "grow" and owner in cells:
            assert ledger.reserve(owner, len(cells[owner]) + count)
            cells[owner] += [next(fresh) for _ in range(count)]
        elif op == "release" and owner in cells:
            ledger.release(owner)
            del cells[owner]
        check()


def test_the_cells_staying_when_an_owner_goes_are_those_shared() -> None:
    ledger = KvLedger(100)
    assert ledger.reserve(1, 40)
    ledger.share(2, 1, 30)
    assert ledger.reserve(2, 50)
    ledger.share(3, 2, 45)
    assert (ledger.staying(1), ledger.staying(2), ledger.staying(3)) == (30, 45, 45)
    ledger.release(3)
    assert ledger.staying(2) == 30


def test_nothing_past_the_prompt_is_promised_for_no_completion() -> None:
    assert cells_needed(prompt=100, limit=0) == 100
    assert cells_needed(prompt=100, limit=1) == 100


def test_bytes_per_token_read_the_architectures_own_keys() -> None:
    # Gemma 3 270M: its heads are 256 wide, wider than its embedding over its heads
    meta = {"general.architecture": "gemma3", "gemma3.block_count": "18",
            "gemma3.attention.head_count": "4", "gemma3.attention.head_count_kv": "1",
            "gemma3.embedding_length": "640", "gemma3.attention.key_length": "256",
            "gemma3.attention.value_length": "256"}  # fmt: skip
    assert bytes_per_token(meta, 2) == 18 * 1 * (256 + 256) * 2
    # no kv head count: as many as the heads; a head width that does not divide is floored
    plain = {"general.architecture": "qwen2", "qwen2.block_count": "2",
             "qwen2.attention.head_count": "3", "qwen2.embedding_length": "100",
             "qwen2.attention.key_length": "not a number"}  # fmt: skip
    assert bytes_per_token(plain, 1) == 2 * 3 * (33 + 33)


def test_a_context_for_memory_is_a_whole_number_of_tokens() -> None:
    fits = context_for_memory(131072, 1000, 10**7 + 500, floor=2048)
    assert fits == 10_000 and isinstance(fits, int)
    assert context_for_memory(131072, 1, 5000, floor=2048) == 5000


def test_the_ledger_refuses_what_would_break_its_count() -> None:
    ledger = KvLedger(100)
    assert ledger.reserve(1, 40)
    with pytest.raises(AssertionError):
        ledger.share(2, 1, 41)  # more than the base holds
    ledger.share(2, 1, 30)
    ledger.share(2, 1, 30)  # again, the same: nothing changes
    assert (ledger.reserved, ledger.promised(2)) == (40, 30)
    assert ledger.reserve(2, 30)  # exactly what it shares: none of its own
    with pytest.raises(AssertionError):
        ledger.reserve(2, 29)  # less than it shares
    ledger.release(7)  # an owner never seen: nothing to free
    assert (ledger.staying(1), ledger.staying(3)) == (30, 0)


def test_the_heir_is_the_one_sharing_most_whatever_its_id() -> None:
    ledger = KvLedger(100)
    assert ledger.reserve(1, 40)
    ledger.share(2, 1, 20)
    assert ledger.reserve(2, 25)
    ledger.share(3, 1, 30)
    assert ledger.reserve(3, 35)
    ledger.release(1)
    assert (ledger.base(3), ledger.base(2)) == (None, (3, 20))
    assert ledger.reserved == 35 + 5
