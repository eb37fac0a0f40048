from coderai.engine.kv import (
    KvLedger,
    bytes_per_token,
    cells_needed,
    context_for_memory,
    grown,
    reservation,
)


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
    assert (ledger.reserved, ledger.holds(1), ledger.free()) == (70, 0, 30)


def test_kv_bytes_per_token_come_from_the_gguf_metadata() -> None:
    # SmolLM2-135M: 30 layers, 9 heads of 64, 3 KV heads
    meta = {"general.architecture": "llama", "llama.block_count": "30",
            "llama.attention.head_count": "9", "llama.attention.head_count_kv": "3",
            "llama.embedding_length": "576"}  # fmt: skip
    assert bytes_per_token(meta, 2) == 30 * 3 * (64 + 64) * 2
    assert bytes_per_token({}, 2) == 0


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
