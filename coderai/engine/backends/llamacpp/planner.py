"""Which sequences a step decodes, and how much of each: the waiting line and admission
(cells promised through the cache manager, a prefix entry or a saved state to start
from), leaders and followers (a sequence reading the same prompt as an older one waits and
copies its cells), growth and preemption, and the step plan.

A step decodes one token of every decoding sequence, their drafts, and the next chunk of
the prompts being read, oldest first. While others decode, a chunk is sized so that a
step takes about `prefill_step` seconds, so a long prompt delays the other streams by that
much a step instead of freezing them; alone, a prompt is read `n_batch` tokens a step.
A request without max_tokens is promised cells a few at a time. When one cannot grow it
pauses (the others go on); when every sequence that could move is paused, the youngest is
preempted: its cells are freed and it reads its tokens again once there is room, keeping
its sampler, so its text goes on from where it was.
"""

from __future__ import annotations

import itertools
from collections import deque

from coderai.engine.backends.llamacpp.cache_manager import CacheManager
from coderai.engine.backends.llamacpp.checkpoints import Memory, last_point, whole
from coderai.engine.backends.llamacpp.host_tier import HostTier
from coderai.engine.backends.llamacpp.kv import reservation
from coderai.engine.backends.llamacpp.parking import Parking
from coderai.engine.backends.llamacpp.prefix_cache import Hit, common_prefix
from coderai.engine.backends.llamacpp.settings import MIN_CHUNK
from coderai.engine.backends.llamacpp.slot import Plan, Run, Slot
from coderai.engine.backends.llamacpp.speculation import Speculation


class Planner:
    def __init__(
        self,
        cache: CacheManager,
        host: HostTier | None,
        speculation: Speculation,
        *,
        n_batch: int,
        reserve_step: int,
        parking: Parking,
        park_step: float,
    ) -> None:
        self.cache, self.host, self.speculation = cache, host, speculation
        #: when idle entries are parked (parking.py), and the seconds of saving a step may
        #: take while no prompt is read
        self.parking = parking
        self.park_step = park_step
        self.policy = cache.policy
        self.n_batch = n_batch
        self.reserve_step = reserve_step
        #: sequences started and not yet promised cells, in arrival order
        self.waiting: deque[Slot] = deque()
        #: every sequence started here and not yet released
        self.slots: set[Slot] = set()
        self._admissions = itertools.count()
        self.preemptions = 0
        #: sequences released: a reader of the published counters can tell they are from
        #: after a given sequence ended (they are published a few times a second)
        self.released = 0

    def add(self, slot: Slot) -> None:
        self.slots.add(slot)
        self.waiting.append(slot)

    def release(self, slot: Slot) -> None:
        """A sequence ends: its cells become a prefix entry where there is a prefix cache
        and it read any, else they are freed."""
        self.released += 1
        self.slots.discard(slot)
        if slot in self.waiting:
            self.waiting.remove(slot)
        cache, tokens = self.cache, slot.tokens[: slot.decoded]
        if not (slot.admitted and slot.decoded and cache.prefixes.max_entries):
            cache.retire(slot.seq_id)
            return
        cache.finish(slot.seq_id, tokens)

    def forget(self, slot: Slot) -> None:
        """Free a sequence's cells (it keeps its id): it reads its tokens again."""
        self.cache.clear(slot.seq_id)
        slot.decoded = 0
        slot.admitted = False

    # -- the plan ----------------------------------------------------------------------------
    def plan(self, slots: list[Slot], prompt_budget: int) -> Plan:
        """What a step decodes for `slots` (those the scheduler steps), reading at most
        `prompt_budget` prompt tokens where others decode; preempting the youngest paused
        sequence while nothing else could move."""
        plan = self._plan(slots, prompt_budget)
        while not plan.runs and plan.paused:
            self._preempt(plan.paused)
            plan = self._plan(slots, prompt_budget)
        self._park(slots)
        return plan

    def _plan(self, slots: list[Slot], prompt_budget: int) -> Plan:
        plan = Plan()
        # a paused sequence is waiting to grow: new ones do not take the cells it needs
        if not any(s.admitted and self._must_grow(s) for s in slots):
            self._admit()
        budget = self.n_batch
        for slot in slots:
            if slot.admitted and len(slot.tokens) - slot.decoded == 1 and budget:
                if self._must_grow(slot) and not self.cache.grow(
                    slot.seq_id, slot.need, self.reserve_step
                ):
                    plan.paused.append(slot)
                    continue
                plan.runs.append(Run(slot, slot.decoded, slot.decoded + 1))
                budget -= 1
        reading = any(s.admitted and s.reading for s in slots)
        self.speculation.draft(
            [run.slot for run in plan.runs], budget, self.cache.promised, reading
        )
        budget -= sum(len(run.slot.draft) for run in plan.runs)
        if plan.runs:  # others decode: read no more than keeps their step short
            budget = min(budget, prompt_budget)
        stepped = set(slots)
        for slot in sorted((s for s in slots if s.admitted and s.reading), key=lambda s: s.order):
            if self._follow(slot, stepped):
                continue
            if not budget:
                break
            run = self._chunk(slot, budget)
            plan.runs.append(run)
            budget -= min(budget, run.end - run.first)
        return plan

    def _chunk(self, slot: Slot, budget: int) -> Run:
        """The next part of a prompt a step reads: an image whole (a step of its own:
        runner.py), else up to `budget` tokens, ending before the next image and at the
        prompt's last checkpoint (checkpoints.py)."""
        image = slot.images.length_at(slot.decoded) if slot.images else 0
        if image:
            return Run(slot, slot.decoded, slot.decoded + image)
        end = min(len(slot.tokens), slot.decoded + budget)
        later = slot.images.next_after(slot.decoded) if slot.images else None
        if later is not None:
            end = min(end, later)  # the text up to the next image
        point = last_point(slot.seq.prompt_tokens)
        if self.policy.checkpoints and slot.decoded < point < end:
            end = point
        return Run(slot, slot.decoded, end)

    def _must_grow(self, slot: Slot) -> bool:
        return slot.decoded + 1 > self.cache.promised(slot.seq_id)

    def _preempt(self, paused: list[Slot]) -> None:
        """Free the youngest paused sequence's cells so the others can grow; it waits at
        the head of the line and reads its tokens again when there is room (from host RAM,
        where there is a host tier)."""
        victim = max(paused, key=lambda s: s.order)
        self.preemptions += 1
        if self.host is not None and victim.decoded:
            self.host.save(victim.seq_id, victim.tokens[: victim.decoded])
        self.forget(victim)
        self.waiting.appendleft(victim)

    # -- admission ---------------------------------------------------------------------------
    def _admit(self) -> None:
        """Promise cells to waiting sequences in arrival order while the cache has room."""
        admitted_any = False
        while self.waiting and self._promise(self.waiting[0]):
            admitted_any = True
        if self.policy.parks_idle and admitted_any and len(self.cache.prefixes):
            assert self.host is not None
            if not self.parking.due:  # a new round of parks, with RAM's room for it
                self.host.new_round()
            self.parking.start()

    def _promise(self, slot: Slot) -> bool:
        """Promise the first waiting sequence its cells, admit it and start it from what it
        can reuse; False where it does not fit yet (it is promised nothing; prefix entries
        may have been let go trying).

        The prefix entry it will start from is kept while others go for room; if even so
        it does not fit, it takes that entry's cells over. An entry it covers whole is
        taken over first: kept, it would only hold the same cells twice over (its release
        keeps the longer one), and others need not go."""
        cache = self.cache
        want = reservation(len(slot.tokens), slot.need, slot.bounded, self.reserve_step)
        hit = cache.lookup(slot.tokens)
        if hit is not None and self.policy.parks_idle and hit.tokens < MIN_CHUNK:
            # where the entry is parked while this one runs, its cells past the shared
            # ones are saved (and these, apart: host_tier.py): for fewer than MIN_CHUNK
            # tokens, reading them costs less
            hit = None
        taken = None
        if hit is not None and hit.tokens >= cache.prefixes.length(hit.entry) - 1:
            taken = cache.take_over(slot.seq_id, hit, want)
        if taken is None:
            if hit is not None:
                cache.will_share(slot.seq_id, hit)
            if cache.reserve(slot.seq_id, want, hit.entry if hit else None):
                self._enter(slot)
                self._reuse(slot, hit)
                return True
            if hit is not None:
                taken = cache.take_over(slot.seq_id, hit, want)
        if taken is None:
            cache.withdraw(slot.seq_id)
            return False
        self._enter(slot)
        slot.decoded = taken
        self._reuse(slot, None)  # the entry is gone: what it gave is all there is
        return True

    def _enter(self, slot: Slot) -> None:
        """The first waiting sequence is admitted: it runs, youngest."""
        assert self.waiting[0] is slot
        self.waiting.popleft()
        slot.admitted = True
        slot.order = next(self._admissions)

    def _reuse(self, slot: Slot, hit: Hit | None) -> None:
        """Start from the entry that shares the longest prefix with its tokens, `hit` (none
        if it took an entry's cells over as it was admitted), then from host RAM where that
        gives more; look for a leader."""
        if hit is not None:
            slot.decoded = self.cache.start_from(hit.entry, slot.seq_id, hit.tokens)
            if self.policy.takes_over:
                self.cache.let_go(hit.entry, hit.tokens)
        if self.host is not None:
            slot.decoded = self.host.recall(slot.seq_id, slot.tokens, slot.decoded)
        if not slot.started:  # a preempted sequence reading its tokens again is no new hit
            slot.started = True
            slot.seq.cached_tokens = slot.decoded
            if slot.decoded:
                self.cache.prefixes.count_hit(slot.decoded)
        self._find_leader(slot)

    def _park(self, stepped: list[Slot]) -> None:
        """Park the prefix entries no waiting sequence would start from (host_tier.py),
        when parking.py says: ahead of the prompts being read where reading them beside
        the idle cells costs more than saving those, else once no prompt is being read, a
        bounded amount a step. An entry a running sequence started from is parked too:
        its cells past the shared ones are saved (host_tier.save), and the shared ones
        stay with that sequence."""
        parking = self.parking
        if not parking.due:
            return
        assert self.host is not None
        # the tokens this step's sequences decode before their first (or, preempted, next)
        # token: their prompts' left, the last one too where all else came from a cache (a
        # sequence whose client lags is not stepped: not waited for)
        to_read = sum(len(s.tokens) - s.decoded for s in stepped
                      if s.admitted and (s.reading or not s.answering))  # fmt: skip
        if to_read and not parking.ahead(to_read):
            parking.wait()
            return
        most = None if to_read else parking.step_bound(self.park_step)
        # (a hit under MIN_CHUNK is not taken; looking does not reorder the entries: the
        # entries these prompts would start from are kept from parking by `busy`, not by
        # being the most recently used)
        hits = (self.cache.lookup(s.tokens, touch=False) for s in self.waiting)
        busy = {hit.entry for hit in hits if hit and hit.tokens >= MIN_CHUNK}
        began = parking.clock()
        cells, more = self.host.park_idle(busy, most)
        parking.parked_now(cells, parking.clock() - began, more)

    # -- leaders and followers ---------------------------------------------------------------
    def _find_leader(self, slot: Slot) -> None:
        """An older running sequence whose tokens begin as this one's do, further than any
        prefix entry: this one waits for it to read them and copies its cells."""
        slot.leader, slot.shared = None, 0
        if self.policy.takes_over:
            return
        last = len(slot.tokens) - 1  # the last prompt token is read here: its logits
        for other in self.slots:
            if other is slot or not other.admitted or other.order > slot.order:
                continue
            shared = min(common_prefix(other.tokens, slot.tokens), last)
            if shared >= MIN_CHUNK and shared > max(slot.decoded, slot.shared):
                slot.leader, slot.shared = other, shared

    def _follow(self, slot: Slot, stepped: set[Slot]) -> bool:
        """Copy the leader's cells once it has read the shared tokens; True while this
        sequence still waits for them. A leader that is gone, preempted or not stepped (its
        client lags) is not waited for: this one reads its tokens itself."""
        leader = slot.leader
        if leader is None:
            return False
        if leader.seq.state is not leader or not leader.admitted or leader not in stepped:
            slot.leader = None
            return False
        if leader.decoded < slot.shared:
            return True
        memory, policy = self.cache.memory, self.policy
        if policy.memory is not Memory.FULL and not whole(
            slot.shared, memory.held(leader.seq_id), policy.memory, policy.sliding_window
        ):  # its window has slid past the shared tokens (or its recurrent state is later)
            slot.leader = None
            return False
        if policy.shares_cells:  # its first cells (an entry's, that others may share) stay
            memory.copy(leader.seq_id, slot.seq_id, slot.decoded, slot.shared)
        else:  # a window or recurrent state is the leader's as a whole
            memory.drop(slot.seq_id)
            memory.copy(leader.seq_id, slot.seq_id, 0, slot.shared)
        gained = slot.shared - slot.decoded
        slot.decoded, slot.leader = slot.shared, None
        self.cache.prefixes.count_hit(gained)
        if self.host is not None and policy.saves_tails:  # its own conversation's tail
            slot.decoded = self.host.recall(slot.seq_id, slot.tokens, slot.decoded)
        slot.seq.cached_tokens = max(slot.seq.cached_tokens, slot.decoded)
        return False

    def stats(self) -> dict[str, int]:
        admitted = [s for s in self.slots if s.admitted]
        return {
            "running": len(admitted),
            "waiting": len(self.waiting),
            "kv_used": sum(s.decoded for s in admitted),
            "preempted": self.preemptions,
            "released": self.released,
            "parked_cells": self.parking.parked,
            "parks_deferred": self.parking.deferred,
        }
