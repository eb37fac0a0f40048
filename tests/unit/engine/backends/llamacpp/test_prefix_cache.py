from coderai.engine.backends.llamacpp.prefix_cache import PrefixCache, common_prefix


def test_common_prefix_counts_equal_leading_tokens() -> None:
    assert common_prefix([1, 2, 3, 4], [1, 2, 9]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([5] * 1000 + [1], [5] * 1000 + [2]) == 1000
    assert common_prefix([], [1]) == 0
    assert common_prefix([1], [2]) == 0


def test_the_longest_exact_prefix_wins_and_the_last_token_is_left_to_decode() -> None:
    cache = PrefixCache(max_tokens=100, max_entries=4)
    assert cache.add(10, [1, 2, 3]) == []
    assert cache.add(11, [1, 2, 7, 8, 9]) == []
    assert cache.match([1, 2, 7, 8, 9, 5]) == (11, 5)
    assert cache.match([1, 2, 7, 8, 9]) == (11, 4)  # the same prompt: all but its last
    assert cache.match([1, 2, 3, 4]) == (10, 3)
    assert cache.match([9, 9]) is None


def test_an_entry_whose_tokens_another_extends_is_let_go() -> None:
    cache = PrefixCache(max_tokens=100, max_entries=4)
    cache.add(10, [1, 2, 3])
    assert cache.add(11, [1, 2, 3, 4, 5]) == [10]
    assert len(cache) == 1 and cache.tokens == 5


def test_entries_past_the_bounds_go_least_recently_used_first() -> None:
    cache = PrefixCache(max_tokens=10, max_entries=2)
    cache.add(1, [1, 1, 1])
    cache.add(2, [2, 2, 2])
    cache.match([1, 1, 1, 5])  # entry 1 was used last
    assert cache.add(3, [3, 3, 3]) == [] and cache.over()
    assert cache.evict() == 2 and not cache.over()
    assert cache.add(4, [4] * 11) == [4] and len(cache) == 2  # longer than the bound
    cache.add(5, [5] * 6)  # 3 + 6 tokens fit, 3 + 3 + 6 do not
    assert cache.over() and cache.evict() == 1 and not cache.over()
    assert cache.evict() == 3 and cache.evict() == 5 and cache.evict() is None
    assert cache.tokens == 0


def test_the_bound_counts_the_cells_entries_take_not_their_tokens() -> None:
    cells = {1: 8, 2: 1, 3: 1}  # 2 and 3 share 7 of their 8 tokens' cells with 1
    cache = PrefixCache(max_tokens=10, max_entries=4, size=cells.__getitem__)
    for seq_id in cells:
        assert cache.add(seq_id, [9] * 7 + [seq_id]) == []
    assert cache.tokens == 10 and not cache.over()


def test_eviction_spares_the_entry_a_new_prompt_starts_from() -> None:
    cache = PrefixCache(max_tokens=100, max_entries=4)
    cache.add(1, [1, 2, 3])
    cache.add(2, [7, 8, 9])
    assert cache.evict(keep=1) == 2
    assert cache.evict(keep=1) is None and len(cache) == 1


def test_a_taken_entry_is_no_longer_kept_nor_matched() -> None:
    cache = PrefixCache(max_tokens=100, max_entries=4)
    cache.add(1, [1, 2, 3, 4])
    assert cache.match([1, 2, 3, 5]) == (1, 3)
    cache.take(1)
    assert cache.match([1, 2, 3, 5]) is None and cache.tokens == 0


def test_a_look_that_touches_nothing_leaves_the_order_as_it_was() -> None:
    """What the parking step asks (which entries waiting prompts would start from) is not a
    use: the entry it finds is still the first to go."""
    cache = PrefixCache(max_tokens=100, max_entries=4)
    cache.add(1, [1, 1, 1])
    cache.add(2, [2, 2, 2])
    assert cache.match([1, 1, 1, 5], touch=False) == (1, 3)
    assert cache.ids() == [1, 2] and cache.evict() == 1
