"""The host-RAM prompt cache's bookkeeping (coderai/engine/backends/llamacpp/ram_cache.py)."""

from __future__ import annotations

from coderai.engine.backends.llamacpp.checkpoints import Held
from coderai.engine.backends.llamacpp.host_tier import RAM_TAIL, worth_taking
from coderai.engine.backends.llamacpp.ram_cache import RamCache, Saved
from coderai.engine.holdings import LEAD, lead_of


def saved(tokens: list[int], size: int = 10) -> Saved:
    return Saved(tokens, b"x" * size, Held(0, len(tokens)))


def whole(_saved: Saved, common: int) -> int:
    return common


def test_the_state_sharing_the_most_tokens_is_restored_and_at_most_all_but_the_last() -> None:
    cache = RamCache(1000)
    first, second = saved([1, 2, 3]), saved([1, 2, 9, 9, 9])
    cache.put(first)
    cache.put(second)
    assert cache.match([1, 2, 3, 4], whole, 100) == (first, 3)
    assert cache.match([1, 2, 9, 9, 9, 8], whole, 100) == (second, 5)
    hit = cache.match([1, 2, 3], whole, 100)
    assert hit is not None and hit[1] == 2  # the last token is read: its logits are needed


def test_a_state_too_large_for_the_sequences_promise_is_not_restored() -> None:
    cache = RamCache(1000)
    cache.put(saved([1, 2, 3, 4, 5, 6]))
    assert cache.match([1, 2, 3, 7], whole, 5) is None
    assert cache.match([1, 2, 3, 7], whole, 6) is not None


def test_what_a_state_can_give_is_asked_of_the_model_kind() -> None:
    cache = RamCache(1000)
    cache.put(saved([1, 2, 3, 4]))
    assert cache.match([1, 2, 3, 4, 5], lambda s, n: 0, 100) is None


def test_the_bound_in_bytes_lets_the_least_recently_used_go_first() -> None:
    cache = RamCache(25)
    cache.put(saved([1, 1]))
    cache.put(saved([2, 2]))
    assert cache.match([1, 1, 0], whole, 100) is not None  # used: now the most recent
    cache.put(saved([3, 3]))
    assert len(cache) == 2 and cache.bytes == 20
    assert cache.match([2, 2, 0], whole, 100) is None
    assert not cache.put(saved([4], size=26))  # larger than the bound: not kept


def test_a_state_that_holds_an_older_ones_tokens_replaces_it() -> None:
    cache = RamCache(1000)
    cache.put(saved([1, 2]))
    cache.put(saved([1, 2, 3, 4]))
    assert len(cache) == 1 and cache.bytes == 10


def test_a_state_is_worth_starting_from_for_many_tokens_or_half_of_what_it_holds() -> None:
    assert worth_taking(RAM_TAIL, 100 * RAM_TAIL)  # a system prompt beside a long talk
    assert not worth_taking(5, 2112)  # a chat template's first tokens of another's talk
    assert worth_taking(60, 120) and not worth_taking(59, 120)  # half of a short one
    assert not worth_taking(RAM_TAIL - 1, 2 * RAM_TAIL)


def test_a_saved_tail_past_a_few_shared_tokens_is_what_they_lead_on_to() -> None:
    ram = RamCache(1 << 20)
    talk = list(range(1000))
    ram.put(Saved(talk[:800], b"x" * 10, Held(200, 800), start=200))
    assert ram.continues(talk, 100, 200) and ram.continues(talk, 199, 250)
    assert not ram.continues(talk, 200, 300)  # it begins at what is held already
    assert not ram.continues(talk, 100, 199)  # restored up to 199, it cannot begin
    assert not ram.continues(talk[:200] + [-1] * 800, 100, 200)  # another conversation
    assert not ram.continues(talk, 100, 800)  # it holds nothing past that


def test_the_states_leads_are_their_prompts_a_tails_too() -> None:
    cache = RamCache(10_000)
    long, other = list(range(LEAD + 10)), list(range(1, LEAD + 11))
    cache.put(saved(long))
    tail = Saved(other, b"x" * 10, Held(100, len(other)), start=100)  # its head is elsewhere
    cache.put(tail)
    cache.put(saved(list(range(5000, 5000 + LEAD - 1))))  # shorter than a lead: none
    assert cache.leads() == {lead_of(long), lead_of(other)}
