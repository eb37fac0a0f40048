"""What an engine says it holds of each conversation (engine/holdings.py)."""

from __future__ import annotations

from coderai.engine.holdings import LEAD, LEADS, Holdings, Report, lead_of, leads_of


def prompt(seed: int, length: int = LEAD + 40) -> list[int]:
    return [seed * 1000 + i for i in range(length)]


def lead(seed: int) -> int:
    found = lead_of(prompt(seed))
    assert found is not None
    return found


def test_a_lead_is_the_first_lead_tokens_whatever_follows() -> None:
    first, later_turn = prompt(1), [*prompt(1), 7, 8, 9]
    assert lead_of(first) == lead_of(later_turn) is not None
    assert lead_of(prompt(2)) != lead_of(first)
    # one token changed inside the lead is another lead; past it, the same
    changed = list(first)
    changed[LEAD - 1] += 1
    assert lead_of(changed) != lead_of(first)
    changed = list(first)
    changed[LEAD] += 1
    assert lead_of(changed) == lead_of(first)


def test_a_prompt_shorter_than_a_lead_has_none() -> None:
    assert lead_of(prompt(1, LEAD - 1)) is None
    assert leads_of([prompt(1, LEAD - 1), prompt(2)]) == {lead(2)}


def test_held_names_the_affinities_whose_lead_is_present_most_recent_first() -> None:
    holdings = Holdings()
    holdings.note("a", lead(1))
    holdings.note("b", lead(2))
    holdings.note("c", lead(3))
    holdings.note("", lead(4))  # a job without an affinity is not noted
    holdings.note("short", None)  # nor one with a prompt too short to matter
    holdings.note("x" * 65, lead(4))  # nor an affinity longer than a hash
    present = {lead(1), lead(3), lead(4)}
    assert holdings.held(present) == Report(["c", "a"], cut=False)
    holdings.note("a", lead(1))  # seen again: the most recent
    assert holdings.held(present) == Report(["a", "c"], cut=False)
    assert holdings.held(present, most=1) == Report(["a"], cut=True)
    assert holdings.held(present, most=2) == Report(["a", "c"], cut=False)
    assert holdings.held(set()) == Report([], cut=False)


def test_the_conversations_running_come_first_whatever_is_held() -> None:
    holdings = Holdings()
    holdings.note("a", lead(1))
    report = holdings.held({lead(1)}, first=["run", "a", "run2", "y" * 65])
    assert report == Report(["run", "a", "run2"], cut=False)
    assert holdings.held({lead(1)}, first=["run", "run2"], most=2) == Report(["run", "run2"], True)


def test_two_conversations_with_one_system_prompt_share_its_lead() -> None:
    holdings = Holdings()
    holdings.note("first", lead_of([*prompt(1), 1, 2]))
    holdings.note("second", lead_of([*prompt(1), 3, 4]))
    assert holdings.held({lead(1)}).names == ["second", "first"]


def test_a_key_over_several_prompts_is_held_while_any_of_its_last_few_is() -> None:
    holdings = Holdings()
    holdings.note("key", lead(1))  # the main conversation
    holdings.note("key", lead(2))  # a subagent's, under the same client key
    assert holdings.held({lead(1)}).names == ["key"]
    assert holdings.held({lead(2)}).names == ["key"]
    for seed in range(3, 3 + LEADS):  # past the last few, the first is forgotten
        holdings.note("key", lead(seed))
    assert holdings.held({lead(1)}).names == []
    assert holdings.held({lead(3)}).names == ["key"]
    holdings.note("key", lead(3))  # seen again: one lead kept once
    assert holdings.held({lead(4)}).names == ["key"]


def test_the_least_recently_seen_are_forgotten_past_the_bound() -> None:
    holdings = Holdings(noted=3)
    for i in range(5):
        holdings.note(f"c{i}", lead(i))
    assert holdings.held({lead(i) for i in range(5)}).names == ["c4", "c3", "c2"]
