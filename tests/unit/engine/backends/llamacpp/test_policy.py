"""The cache policy is decided once from what a model's layers hold and how its context was
built (coderai/engine/backends/llamacpp/policy.py)."""

from __future__ import annotations

from coderai.engine.backends.llamacpp.checkpoints import Memory
from coderai.engine.backends.llamacpp.policy import CachePolicy, cache_policy


def policy(memory: Memory = Memory.FULL, **changes: object) -> CachePolicy:
    facts: dict[str, object] = {"swa_full": False, "flash": True, "host_ram": False,
                                "parallel": 4, "entries": 4, "id_bound": 16,
                                "checkpoints": 3, "checkpoint_every": 1024}  # fmt: skip
    facts.update(changes)
    return cache_policy(memory, 512 if memory is Memory.WINDOW else 0, **facts)  # type: ignore[arg-type]


def test_a_full_attention_model_shares_cells_and_keeps_no_checkpoints() -> None:
    found = policy()
    assert found.shares_cells and not found.takes_over
    assert found.checkpoints == 0
    # the scratch id is the first past the running sequences' and the entries'
    assert found.scratch == 8 and found.saves_tails


def test_idle_entries_are_parked_only_without_flash_attention_and_with_host_ram() -> None:
    assert policy(flash=False, host_ram=True).parks_idle
    assert not policy(flash=True, host_ram=True).parks_idle
    assert not policy(flash=False, host_ram=False).parks_idle
    # nor where a tail could not be saved through the scratch sequence
    assert not policy(flash=False, host_ram=True, id_bound=8).parks_idle
    assert not policy(Memory.WINDOW, flash=False, host_ram=True).parks_idle


def test_a_window_sized_per_sequence_takes_entries_over_and_shares_nothing() -> None:
    found = policy(Memory.WINDOW)
    assert found.takes_over and not found.shares_cells and not found.saves_tails
    assert found.checkpoints == 3 and found.sliding_window == 512
    assert not policy(Memory.WINDOW, swa_full=True).takes_over


def test_a_recurrent_model_keeps_checkpoints_and_shares_no_cells() -> None:
    found = policy(Memory.RECURRENT)
    assert not found.shares_cells and not found.takes_over and found.checkpoints == 3


def test_no_scratch_id_without_a_prefix_cache_or_past_llama_cpps_bound() -> None:
    assert policy(entries=0).scratch is None
    assert policy(id_bound=8).scratch is None
    assert policy(id_bound=9).scratch == 8
