"""Replicas: which engines a model with replicas runs on (placement), which replica each
request goes to under each policy (replicas.choose, ReplicaRouter), and what names a
conversation (affinity)."""

from __future__ import annotations

from coderai.front.api.affinity import leading_hash
from coderai.front.dispatch.placement import EngineAbility, ModelView, assign_owners
from coderai.front.dispatch.registry import SENT_REMEMBERED, EngineRecord
from coderai.front.dispatch.replicas import (
    REMEMBERED,
    Replica,
    ReplicaRouter,
    Went,
    choose,
    home_lost,
)

GGUF = frozenset({"gguf"})
FOUR = [EngineAbility(f"e{i}", GGUF) for i in range(4)]


def view(model_id: str, replicas: int = 1, engines: tuple[str, ...] | None = None,
         pin: str | None = None, capability: str = "gguf") -> ModelView:  # fmt: skip
    return ModelView(model_id, model_id, capability, pin, replicas, engines)


# -- placement -------------------------------------------------------------------------------
def test_replicas_go_to_the_engines_holding_the_fewest_models_after_the_owner() -> None:
    out = assign_owners([view("a"), view("b"), view("coder", replicas=3)], FOUR, None)
    # a on e0, b on e1; coder's owner is e2 (fewest), then e3, then e0 (ties: order)
    assert out.owners["coder"] == "e2"
    assert out.replicas == {"coder": ("e2", "e3", "e0")}
    assert out.warnings == {}


def test_a_pinned_model_with_replicas_keeps_its_pin_first() -> None:
    out = assign_owners([view("coder", replicas=2, pin="e3")], FOUR, None)
    assert out.replicas["coder"] == ("e3", "e0")


def test_more_replicas_than_able_engines_are_warned_of_and_the_able_ones_used() -> None:
    engines = [*FOUR[:2], EngineAbility("t", frozenset({"transformers"}))]
    out = assign_owners([view("coder", replicas=4)], engines, None)
    assert out.replicas["coder"] == ("e0", "e1")
    assert out.warnings["coder"] == "asks for 4 replicas; 2 engines can run it"


def test_listed_engines_are_used_in_order_and_the_unusable_ones_named() -> None:
    engines = [*FOUR, EngineAbility("t", frozenset({"transformers"}))]
    out = assign_owners([view("coder", engines=("e2", "nope", "t", "e1"))], engines, None)
    assert out.owners["coder"] == "e2" and out.replicas["coder"] == ("e2", "e1")
    assert out.warnings["coder"] == (
        "engine 'nope' does not exist; engine 't' cannot run gguf models"
    )
    # the next model goes where fewest are: e0 or e3, not the replicas' engines
    out = assign_owners([view("coder", engines=("e0", "e1")), view("x")], FOUR, None)
    assert out.owners["x"] == "e2"


# -- routing ---------------------------------------------------------------------------------
def r(name: str, load: int = 0, free: int = 8, holds: bool = False,
      told: int | None = None, epoch: int = 1) -> Replica:  # fmt: skip
    return Replica(name, load, free, holds, told, epoch)


def test_cache_aware_keeps_a_conversation_home_until_its_load_passes_the_bound() -> None:
    replicas = [r("a", load=5, free=3), r("b", load=1, free=7)]
    pick = choose("cache_aware", replicas, home="a", homes={}, turn=0, bound=4)
    assert pick.name == "a"  # 5 - 1 = 4: within the bound
    replicas = [r("a", load=6, free=2), r("b", load=1, free=7)]
    pick = choose("cache_aware", replicas, home="a", homes={}, turn=0, bound=4)
    assert pick.name == "b"  # 6 - 1 > 4: it moves
    # a full home is left for a replica with room, within the bound too
    replicas = [r("a", load=8, free=0), r("b", load=5, free=3)]
    assert choose("cache_aware", replicas, home="a", homes={}, turn=0, bound=4).name == "b"
    # every replica full: the home is waited for
    replicas = [r("a", load=8, free=0), r("b", load=8, free=0)]
    assert choose("cache_aware", replicas, home="a", homes={}, turn=0, bound=4).name == "a"


def test_the_least_loaded_is_one_with_room_where_slots_differ() -> None:
    replicas = [r("radeon", load=2, free=0), r("nvidia", load=3, free=13)]
    for policy in ("least_loaded", "cache_aware"):
        assert choose(policy, replicas, home=None, homes={}, turn=0, bound=4).name == "nvidia"


def test_a_new_conversation_goes_to_the_least_loaded_then_the_least_homed() -> None:
    replicas = [r("a", load=2), r("b", load=1)]
    assert choose("cache_aware", replicas, home=None, homes={}, turn=0, bound=4).name == "b"
    replicas = [r("a"), r("b")]
    homes = {"a": 3, "b": 2}
    assert choose("cache_aware", replicas, home=None, homes=homes, turn=0, bound=4).name == "b"
    # a home that no longer serves counts as none
    assert choose("cache_aware", replicas, home="gone", homes=homes, turn=0, bound=4).name == "b"


def test_round_robin_takes_turns_and_passes_over_a_full_replica() -> None:
    replicas = [r("a"), r("b"), r("c", free=0)]
    picks = [choose("round_robin", replicas, home=None, homes={}, turn=t, bound=4).name
             for t in range(4)]  # fmt: skip
    assert picks == ["a", "b", "a", "a"]
    full = [r("a", free=0), r("b", free=0)]
    assert choose("round_robin", full, home=None, homes={}, turn=1, bound=4).name == "b"


def test_least_loaded_ignores_where_a_conversation_was() -> None:
    replicas = [r("a", load=3), r("b", load=2)]
    assert choose("least_loaded", replicas, home="a", homes={}, turn=0, bound=99).name == "b"


def test_the_router_remembers_each_conversations_replica_and_spreads_new_ones() -> None:
    router = ReplicaRouter()
    idle = [r("a"), r("b")]
    homes = []
    for conversation in ("c1", "c2", "c3", "c4"):
        pick = router.pick("cache_aware", 4, "m", conversation, idle)
        router.dispatched("m", conversation, Went(pick.name, 1, 1))
        homes.append(pick.name)
    assert homes == ["a", "b", "a", "b"]  # nothing runs, yet they spread
    assert router.pick("cache_aware", 4, "m", "c2", idle).name == "b"
    # moved by the load guard, it is remembered where it went
    router.dispatched("m", "c2", Went("a", 1, 2))
    assert router.home_of("m", "c2") == "a"
    assert router.pick("cache_aware", 4, "m", "c5", idle).name == "b"  # a: 3 homes, b: 1


def test_the_router_forgets_the_least_recently_routed_past_its_bound() -> None:
    router = ReplicaRouter()
    for i in range(REMEMBERED + 1):
        router.dispatched("m", f"c{i}", Went("a", 1, i + 1))
    assert router.home_of("m", "c0") is None and router.home_of("m", "c1") == "a"
    assert router.pick("cache_aware", 4, "m", "new", [r("a"), r("b")]).name == "b"


def test_a_replica_that_holds_the_prefix_wins_over_the_least_loaded_when_near() -> None:
    def pick(replicas: list[Replica], home: str | None = None) -> str:
        return choose("cache_aware", replicas, home=home, homes={}, turn=0, bound=4).name

    # no home here (a restarted front, another front's conversation): the holder
    assert pick([r("a", load=3), r("b", load=0, holds=False), r("c", load=2, holds=True)]) == "c"
    # of several holders, the least loaded
    assert pick([r("a", load=3, holds=True), r("b", load=0), r("c", load=2, holds=True)]) == "c"
    # a holder past the bound, or full while another has room, loses to the least loaded
    assert pick([r("a", load=5, holds=True), r("b", load=0)]) == "b"
    assert pick([r("a", load=1, free=0, holds=True), r("b", load=1)]) == "b"
    # the load guard moves a conversation off its home: to a holder within the bound
    assert pick([r("a", load=9), r("b", load=0), r("c", load=3, holds=True)], home="a") == "c"
    # a near home stays home even where another holds the prefix too (it has the latest
    # turns; the other, perhaps only the shared system prompt)
    assert pick([r("a", load=2), r("b", load=0, holds=True)], home="a") == "a"
    # other policies do not look at what is held
    replicas = [r("a", load=2, holds=True), r("b", load=0)]
    assert choose("least_loaded", replicas, home=None, homes={}, turn=0, bound=4).name == "b"
    assert choose("round_robin", replicas, home=None, homes={}, turn=1, bound=4).name == "b"


def test_a_home_is_lost_only_once_it_told_of_the_conversations_last_job() -> None:
    went = Went("a", 1, 7)  # the conversation's last job went to a as its JOB number 7
    assert not home_lost(r("a", holds=True, told=9), went)  # it holds it
    assert not home_lost(r("a", told=6), went)  # its report predates the job: not known
    assert not home_lost(r("a", told=None), went)  # it does not name all, or not known
    assert home_lost(r("a", told=7), went)  # it had taken the job, and does not name it
    assert home_lost(r("a", told=12), went)
    # another incarnation of the engine (restarted): its numbers are not those of `went`
    assert not home_lost(r("a", told=12, epoch=2), went)


def test_the_router_leaves_a_home_that_let_the_prefix_go_for_one_that_holds_it() -> None:
    router = ReplicaRouter()
    router.dispatched("m", "c1", Went("a", 1, 3))  # c1's last job: JOB 3 to a

    def pick(*replicas: Replica) -> str:
        return router.pick("cache_aware", 4, "m", "c1", replicas).name

    # a has not told of JOB 3 yet: home, even with b holding the prefix too
    assert pick(r("a", told=2), r("b", holds=True)) == "a"
    # a has told of it, and let it go: b holds it
    assert pick(r("a", told=5), r("b", load=1, holds=True)) == "b"
    # nobody holds it: every replica is as cold, and it stays home (a conversation of
    # short prompts, never named, so does not move at every turn)
    assert pick(r("a", load=1, told=5), r("b")) == "a"
    # unless its home is past the load guard
    assert pick(r("a", load=5, told=5), r("b")) == "b"


# -- affinity --------------------------------------------------------------------------------
def test_a_conversation_keeps_its_affinity_as_it_grows_and_others_differ() -> None:
    system = {"role": "system", "content": "You are agent 1."}
    first = {"role": "user", "content": "fix the bug"}
    tools = [{"type": "function", "function": {"name": "read"}}]
    turn1 = leading_hash([system, first], tools, "", [])
    turn2 = leading_hash([system, first, {"role": "assistant", "content": "ok"},
                          {"role": "user", "content": "and now?"}], tools, "", [])  # fmt: skip
    assert turn1 == turn2 and len(turn1) == len("lead:") + 16
    other = leading_hash([{"role": "system", "content": "You are agent 2."}, first], tools, "", [])
    assert other != turn1
    assert leading_hash([system, first], [], "", []) != turn1  # the tools are part of it
    assert leading_hash([], [], "x" * 5000, []) == leading_hash([], [], "x" * 4000, [])
    assert leading_hash([], [], "", []) == ""


# -- what an engine says it holds --------------------------------------------------------------
def test_an_engines_holds_report_counts_the_jobs_sent_to_it_up_to_the_one_it_took() -> None:
    record = EngineRecord(b"a:1", "a", 1, 10, "cpu", frozenset({"gguf"}), 4)
    none: frozenset[str] = frozenset()
    record.told_holds({}, none, 0)
    assert record.holds_count == 0  # it has taken no job: it counts none of them
    numbers = [record.sending(job_id) for job_id in (11, 12, 15)]
    assert numbers == [1, 2, 3]
    record.told_holds({"m": frozenset({"c"}), "n": frozenset({"d"})}, frozenset({"n"}), 12)
    assert record.holds_count == 2 and record.holds["m"] == frozenset({"c"})
    # it named all it holds of m; of n, more than it names; of o, nothing (none kept)
    assert record.names_all("m") and not record.names_all("n") and not record.names_all("o")
    # a job it took that this front never sent it (one of a front before a restart)
    record.told_holds({}, none, 99)
    assert record.holds_count is None
    for job_id in range(100, 100 + SENT_REMEMBERED):
        record.sending(job_id)
    record.told_holds({}, none, 11)  # too long ago to be remembered: not known
    assert record.holds_count is None
    record.told_holds({}, none, 100 + SENT_REMEMBERED - 1)
    assert record.holds_count == 3 + SENT_REMEMBERED
