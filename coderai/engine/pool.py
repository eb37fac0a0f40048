"""The model instances of one engine.

Loads run on their own thread so a load never stalls the decode loop of resident models
nor the engine's socket. A model may have up to `max_instances` instances; each takes as
many sequences as its capacity allows (a llama.cpp context: one; a transformers batch:
many). Before a load, idle models are unloaded least-recently-used first when the new one
would not fit (the memory budget, the machine's free RAM, the fleet's RAM cap, and the
free VRAM of the engine's cards); a model that is generating is never unloaded.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from coderai.bus.messages import ModelSpec
from coderai.catalogue import model_options
from coderai.catalogue.file_format import required_capability
from coderai.common.eviction import ResidentView, plan_evictions
from coderai.engine.backends.base import Backend, LoadProgress, ModelInstance
from coderai.errors import JobError

log = logging.getLogger("coderai.engine")
MIB = 1 << 20
_SELF = psutil.Process()


def estimate_bytes(spec: ModelSpec) -> int:
    """Rough memory a model takes once loaded: its weights on disk (or options.memory_mb)."""
    options = spec.options
    if "memory_mb" in options:
        return int(float(options["memory_mb"]) * MIB)
    path = Path(spec.path)
    if not spec.path or not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.glob("*.safetensors")) or sum(
        p.stat().st_size for p in path.glob("*.bin")
    )


def still_to_load(footprint: tuple[int, int], rss_now: int) -> int:
    """What loads in flight will still add to their process's RSS: their sizes less what
    it has grown by since the first began. Counting their whole size on top of a fleet
    measure that already holds part of them would show the fleet over its cap mid-load,
    and the front would unload a model for room that was there."""
    size, rss_at_start = footprint
    return max(0, size - max(0, rss_now - rss_at_start)) if size else 0


def _release_memory() -> None:
    """What unloaded models held goes back: their objects now, and torch's cached CUDA
    blocks, which would otherwise still count as used on the card for other processes
    and for the next VRAM reading (torch is only consulted where a model imported it)."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


@dataclass(frozen=True)
class PoolSnapshot:
    """What the heartbeat reports, published by the scheduler thread whenever it changes,
    so the event loop reads one immutable record instead of the pool's dicts mid-change.
    A load's progress is a float its loader thread stores (an atomic write)."""

    loaded: tuple[str, ...] = ()
    loading: tuple[tuple[str, LoadProgress], ...] = ()

    def progress(self) -> dict[str, float]:
        return {model_id: progress.fraction for model_id, progress in self.loading}


@dataclass(eq=False)
class Resident:
    key: str
    model_id: str
    instance: ModelInstance
    size: int
    active: int = 0
    last_used: float = field(default_factory=time.monotonic)


@dataclass
class _Loading:
    model_id: str
    progress: LoadProgress
    size: int
    #: this process's RSS as the load began: what it has grown by since is (roughly) how
    #: much of the model is in memory already
    rss_at_start: int
    started: float = field(default_factory=time.monotonic)
    #: set once submitted to the loader, right after the load is registered
    future: Future[ModelInstance] | None = None


class ModelPool:
    def __init__(
        self,
        backends: dict[str, Backend],
        on_loaded: Callable[[str], None],
        max_instances: int = 1,
        budget_bytes: int = 0,
    ) -> None:
        self._backends = backends
        self._on_loaded = on_loaded
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="loader")
        #: set from the front's WELCOME: instances one model may have in this engine
        self.max_instances = max_instances
        #: 0 = the machine's available memory decides what fits
        self.budget_bytes = budget_bytes
        #: the fleet's host RAM cap (0: none), what the fleet uses now by process (measured
        #: each heartbeat), and how long a load may wait for room made elsewhere
        self.ram_cap_bytes = 0
        self.fleet: dict[str, int] = {}
        self.room_wait = 300.0
        #: loads that wait for the fleet to have room: key -> (bytes, since)
        self.wanting: dict[str, tuple[int, float]] = {}
        #: measures the fleet now (see fleet.py): a load under the cap decides on a fresh
        #: measure, not on the last heartbeat's, which may predate other engines' loads
        self.fleet_meter: Callable[[], dict[str, int]] | None = None
        #: what the heartbeat tells of loads under the cap (see _publish_room)
        self.room_state: tuple[float, tuple[int, int]] = (0.0, (0, 0))
        #: reads the free VRAM of the engine's cards now (None: no card reports it)
        self.vram_meter: Callable[[], int | None] | None = None
        self.resident: dict[str, list[Resident]] = {}
        self.loading: dict[str, _Loading] = {}
        #: keys of the models the catalogue keeps loaded (never unloaded to make room)
        self._kept: set[str] = set()
        #: replaced (never changed) after every change above; read from other threads
        self.snapshot = PoolSnapshot()

    def _publish(self) -> None:
        self.snapshot = PoolSnapshot(
            tuple(sorted({r.model_id for rs in self.resident.values() for r in rs})),
            tuple((ld.model_id, ld.progress) for ld in self.loading.values()),
        )

    def backend_for(self, spec: ModelSpec) -> Backend:
        capability = required_capability(spec.format, spec.options)
        backend = self._backends.get(capability)
        if backend is None:
            raise JobError(f"this engine cannot run {capability!r} models", kind="unsupported")
        why = model_options.refusal(spec.options, capability)
        if why is not None:  # read nowhere: accepted, it would silently do nothing
            raise JobError(f"model {spec.id}: {why}", kind="bad_model")
        return backend

    def _keep(self, key: str, spec: ModelSpec) -> None:
        """Whether the catalogue keeps this model loaded, as its latest spec says."""
        if spec.keep_loaded:
            self._kept.add(key)
        else:
            self._kept.discard(key)

    def acquire(self, spec: ModelSpec) -> ModelInstance | None:
        """An instance with room for one more sequence, or None (a load may be under way)."""
        key = spec.key()
        self._keep(key, spec)
        instances = self.resident.get(key, [])
        roomy = [r for r in instances if r.active < r.instance.capacity]
        if roomy:
            chosen = min(roomy, key=lambda r: r.active)
            chosen.active += 1
            chosen.last_used = time.monotonic()
            return chosen.instance
        if key not in self.loading and len(instances) < max(1, self.max_instances):
            self._start_load(key, spec)
        return None

    def preload(self, spec: ModelSpec) -> None:
        key = spec.key()
        self._keep(key, spec)
        if not self.resident.get(key) and key not in self.loading:
            self._start_load(key, spec)

    def unload(self, model_id: str) -> int:
        """Unload a model's idle instances (asked for by the front); busy ones stay and
        are unloaded like any other idle model later. Returns how many went."""
        gone = 0
        for key, instances in list(self.resident.items()):
            for resident in [r for r in instances if r.model_id == model_id and not r.active]:
                instances.remove(resident)
                resident.instance.unloaded()
                self._shrinks(resident.size)
                gone += 1
            if not instances:
                del self.resident[key]
        busy = sum(r.model_id == model_id for rs in self.resident.values() for r in rs)
        log.info("unloaded %d instances of %s (%d busy stay)", gone, model_id, busy)
        if gone:
            self._publish()
            _release_memory()
        return gone

    def release(self, instance: ModelInstance) -> None:
        for instances in self.resident.values():
            for resident in instances:
                if resident.instance is instance:
                    resident.active -= 1
                    resident.last_used = time.monotonic()
                    return

    def _start_load(self, key: str, spec: ModelSpec) -> None:
        backend = self.backend_for(spec)
        size = estimate_bytes(spec)
        if self.ram_cap_bytes and self.fleet_meter is not None:
            self.fleet = self.fleet_meter()
        self._make_room(size)
        self._make_vram_room(spec.id, size)
        if self.ram_cap_bytes and self._room_under_cap() < size:
            if size > self.ram_cap_bytes:
                raise JobError(self._no_room(spec.id, size, "more than the cap itself"),
                               kind="load_failed")  # fmt: skip
            # other engines' idle models go first (the front picks them and unloads them);
            # the load starts once the fleet's measure shows the room
            self.wanting.setdefault(key, (size, time.monotonic()))
            self._publish_room()
            return
        self.wanting.pop(key, None)
        progress = LoadProgress()
        model_id = spec.id
        log.info("loading model %s (%.0f MiB)", model_id, size / MIB)
        # registered and published before the loader can take any memory: a measure of
        # the fleet that holds part of this load is never read beside a state that still
        # wants room for it
        loading = _Loading(model_id, progress, size, rss_at_start=_SELF.memory_info().rss)
        self.loading[key] = loading
        self._publish_room()
        loading.future = self._executor.submit(backend.load, spec, progress)
        loading.future.add_done_callback(lambda _f: self._on_loaded(key))
        self._publish()

    def _make_room(self, needed: int) -> None:
        self._evict(needed, self._free_bytes())

    def _make_vram_room(self, model_id: str, needed: int) -> None:
        """On an engine with GPUs, a model goes to its cards: idle models there go first
        when the cards' free VRAM, read now, is short of it."""
        free = self.vram_meter() if self.vram_meter is not None else None
        if free is not None and free < needed:
            log.info("model %s needs %.0f MiB of VRAM and %.0f MiB are free",
                     model_id, needed / MIB, free / MIB)  # fmt: skip
            self._evict(needed, free)

    def _evict(self, needed: int, free: int) -> None:
        everyone = [r for rs in self.resident.values() for r in rs]
        # a model kept loaded is never a candidate, as one that runs is not
        views = [ResidentView(str(id(r)), r.size, r.active > 0 or r.key in self._kept, r.last_used)
                 for r in everyone]  # fmt: skip
        doomed = set(plan_evictions(views, needed, free))
        for resident in everyone:
            if str(id(resident)) in doomed:
                log.info("unloading idle model %s to make room", resident.model_id)
                self.resident[resident.key].remove(resident)
                resident.instance.unloaded()
                self._shrinks(resident.size)
                if not self.resident[resident.key]:
                    del self.resident[resident.key]
        if doomed:
            self._publish()
            _release_memory()

    def _shrinks(self, size: int) -> None:
        """An unload during loads in flight: the RSS it frees is not a load's progress,
        so each load's baseline moves down with it (see still_to_load)."""
        for loading in self.loading.values():
            loading.rss_at_start -= size
        self._publish_room()

    def _free_bytes(self) -> int:
        if self.budget_bytes:
            used = sum(r.size for rs in self.resident.values() for r in rs)
            used += sum(ld.size for ld in self.loading.values())
            free = self.budget_bytes - used
        else:
            free = int(psutil.virtual_memory().available)
        return min(free, self._room_under_cap()) if self.ram_cap_bytes else free

    def _room_under_cap(self) -> int:
        """The cap less what the fleet uses and what this engine is loading (not yet in
        anyone's RSS)."""
        return self.ram_cap_bytes - sum(self.fleet.values()) - self.loading_bytes()

    def loading_bytes(self) -> int:
        return still_to_load(self.loading_footprint(), _SELF.memory_info().rss)

    def loading_footprint(self) -> tuple[int, int]:
        """The sizes of this engine's loads in flight, and its RSS when the first began."""
        if not self.loading:
            return (0, 0)
        loads = self.loading.values()
        return (sum(ld.size for ld in loads), min(ld.rss_at_start for ld in loads))

    def _no_room(self, model_id: str, size: int, why: str) -> str:
        holders = ", ".join(
            f"{name} {rss / MIB:.0f} MiB" for name, rss in sorted(self.fleet.items())
        )
        return (
            f"model {model_id} needs {size / MIB:.0f} MiB of host RAM, {why}: the fleet's cap "
            f"(offload.max_ram_gb) is {self.ram_cap_bytes / MIB:.0f} MiB and holds "
            f"{sum(self.fleet.values()) / MIB:.0f} MiB ({holders or 'nothing measured yet'})"
        )

    def measured(self, fleet: dict[str, int]) -> list[str]:
        """The fleet's new measure. Returns the keys of waiting loads to try again. Over
        the cap, nothing is unloaded here: the front picks the fleet's least recently used
        idle models once for all engines (front/room.py); each engine freeing the whole
        excess itself would free it once per engine."""
        self.fleet = fleet
        return list(self.wanting)

    def expired_waits(self, now: float) -> dict[str, str]:
        """Waiting loads past `room_wait`, each with why it gave up (and forgotten)."""
        out = {}
        for key, (size, since) in list(self.wanting.items()):
            if now - since > self.room_wait:
                del self.wanting[key]
                out[key] = self._no_room(key, size, f"and no room came in {self.room_wait:.0f} s")
        if out:
            self._publish_room()
        return out

    def residents_report(self) -> list[dict[str, object]]:
        """What the heartbeat says of each resident instance: the front picks the fleet's
        least recently used idle model from these when a load elsewhere waits for room."""
        now = time.monotonic()
        return [
            {"model": r.model_id, "mb": r.size / MIB, "busy": r.active > 0,
             "idle_for": 0.0 if r.active else now - r.last_used, "kept": r.key in self._kept,
             **r.instance.facts()}
            for rs in self.resident.values()
            for r in rs
        ]  # fmt: skip

    def _publish_room(self) -> None:
        """(MiB its loads wait for, its loads in flight as (sizes, RSS when the first
        began)): replaced whole at each change, so the heartbeat reads one consistent
        pair from the event loop's thread, whatever this thread does meanwhile."""
        wants = sum(size for size, _ in self.wanting.values()) / MIB
        self.room_state = (wants, self.loading_footprint())

    def finish_load(self, key: str) -> None:
        """Scheduler thread, once a load ends: keep the instance or raise what failed."""
        loading = self.loading.pop(key)
        self._publish_room()
        self._publish()  # the load has ended, whether or not it worked
        assert loading.future is not None  # registered loads are submitted at once
        instance = loading.future.result()
        log.info("model %s loaded in %.1f s", loading.model_id, time.monotonic() - loading.started)
        self.resident.setdefault(key, []).append(
            Resident(key, loading.model_id, instance, loading.size)
        )
        self._publish()

    def stats(self) -> dict[str, dict[str, int]]:
        """Each resident model's instance counters, summed over its instances."""
        out: dict[str, dict[str, int]] = {}
        for instances in self.resident.values():
            for resident in instances:
                totals = out.setdefault(resident.model_id, {})
                for name, value in resident.instance.stats().items():
                    totals[name] = totals.get(name, 0) + value
        return out

    def leads(self) -> dict[str, set[int]]:
        """Per resident model whose instances keep prefixes: the leads of those they keep
        (engine/holdings.py)."""
        out: dict[str, set[int]] = {}
        for instances in self.resident.values():
            for resident in instances:
                leads = resident.instance.leads()
                if leads is not None:
                    out.setdefault(resident.model_id, set()).update(leads)
        return out

    def has_resident(self, key: str) -> bool:
        return bool(self.resident.get(key))

    def close(self) -> None:
        """The engine stops (on the scheduler thread): each model keeps what it would lose
        where it can (persist), then the loader goes."""
        for resident in [r for rs in self.resident.values() for r in rs]:
            try:
                resident.instance.persist()
            except Exception:  # one model's failure must not keep the others from theirs
                log.exception("model %s could not keep its state", resident.model_id)
        self._executor.shutdown(wait=False, cancel_futures=True)
