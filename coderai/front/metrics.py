"""/metrics in the Prometheus text format (prometheus-client).

Counters and histograms are updated where things happen (once per request, and the
inter-token latency once per event through a histogram without a lock); gauges of current
state are read from the dispatcher and the supervisor when scraped, so there is no second
copy of that state to keep in step.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import accumulate

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from coderai.front.dispatch.dispatcher import Dispatcher
from coderai.front.dispatch.engine_view import EngineView

#: what the per-model counters engines report are called here: gauges, then counters
_MODEL_GAUGES = {
    "running": ("coderai_sequences_running", "Sequences decoding or reading their prompt"),
    "waiting": ("coderai_sequences_waiting", "Sequences in a model instance waiting for KV room"),
    "queued": ("coderai_sequences_queued", "Jobs in an engine waiting for a model instance"),
    "kv_used": ("coderai_kv_cells_used", "KV cache cells holding tokens"),
    "kv_reserved": ("coderai_kv_cells_reserved", "KV cache cells promised to sequences"),
    "kv_cells": ("coderai_kv_cells", "KV cache cells in all"),
    "prefix_cached": ("coderai_prefix_cache_cells", "Tokens whose KV cells are kept for reuse"),
    "checkpoints": ("coderai_checkpoints", "Window or recurrent state checkpoints kept"),
    "checkpoint_bytes": ("coderai_checkpoint_bytes", "Bytes of the checkpoints kept"),
    "ram_cache_entries": ("coderai_ram_cache_entries", "Prompt states saved in host RAM"),
    "ram_cache_bytes": ("coderai_ram_cache_bytes", "Bytes of prompt state saved in host RAM"),
    "disk_cache_entries": ("coderai_disk_cache_entries", "Prompt states kept on disk"),
    "disk_cache_bytes": ("coderai_disk_cache_bytes", "Bytes of prompt state kept on disk"),
}
_MODEL_COUNTERS = {
    "preempted": ("coderai_sequences_preempted", "Sequences whose KV cells were taken back"),
    "prefix_hits": ("coderai_prefix_cache_hits", "Sequences that reused a cached prefix"),
    "prefix_tokens": ("coderai_prefix_cache_tokens", "Prompt tokens read from the prefix cache"),
    "checkpoints_restored": (
        "coderai_checkpoints_restored",
        "Prefixes reused by restoring a checkpoint",
    ),
    "steps_aborted": ("coderai_steps_aborted", "Prompt steps stopped by a cancel"),
    "draft_tokens": ("coderai_draft_tokens", "Speculative draft tokens decoded"),
    "draft_accepted": ("coderai_draft_tokens_accepted", "Speculative draft tokens kept"),
    "ram_cache_saves": ("coderai_ram_cache_saves", "Prompt states saved to host RAM"),
    "ram_cache_hits": ("coderai_ram_cache_hits", "Sequences started from a state in host RAM"),
    "ram_cache_tokens": ("coderai_ram_cache_tokens", "Prompt tokens restored from host RAM"),
    "disk_cache_writes": ("coderai_disk_cache_writes", "Prompt states written to disk"),
    "disk_cache_loads": ("coderai_disk_cache_loads", "Prompt states read back from disk"),
    "ram_cache_restore_ms": (
        "coderai_ram_cache_restore_milliseconds",
        "Time spent restoring prompt state from host RAM",
    ),
}
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class _StateCollector(Collector):
    def __init__(self, dispatcher: Dispatcher, engines: Callable[[], list[EngineView]]) -> None:
        self.dispatcher = dispatcher
        self.engines = engines

    def collect(self) -> Iterator[Metric]:
        queue = GaugeMetricFamily("coderai_queue_depth", "Requests waiting for an engine slot")
        queue.add_metric([], len(self.dispatcher.queue))
        yield queue
        views = self.engines()
        in_flight = GaugeMetricFamily(
            "coderai_engine_in_flight", "Requests running on each engine", labels=["engine"]
        )
        restarts = CounterMetricFamily(
            "coderai_engine_restarts", "Engine process restarts", labels=["engine"]
        )
        up = GaugeMetricFamily(
            "coderai_engine_serving", "1 while an engine takes requests", labels=["engine"]
        )
        for view in views:
            in_flight.add_metric([view.name], view.in_flight)
            restarts.add_metric([view.name], view.restarts)
            up.add_metric([view.name], int(view.serving))
        yield in_flight
        yield restarts
        yield up
        yield from _model_families(views)
        yield from _thermal_families(views)
        dropped = CounterMetricFamily(
            "coderai_bus_dropped_frames", "Malformed or unexpected bus frames dropped"
        )
        dropped.add_metric([], self.dispatcher.dropped_frames)
        yield dropped
        holds = CounterMetricFamily(
            "coderai_stream_holds", "Streams whose engine held them while their client lagged"
        )
        holds.add_metric([], self.dispatcher.holds)
        yield holds


def _model_families(views: list[EngineView]) -> Iterator[Metric]:
    labels = ["engine", "model"]
    families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
        **{k: GaugeMetricFamily(n, h, labels=labels) for k, (n, h) in _MODEL_GAUGES.items()},
        **{k: CounterMetricFamily(n, h, labels=labels) for k, (n, h) in _MODEL_COUNTERS.items()},
    }
    for view in views:
        for model, counters in view.models.items():
            for name, value in counters.items():
                family = families.get(name)  # a counter this front does not know is skipped
                if family is not None:
                    family.add_metric([view.name, model], value)
    yield from families.values()


#: per card readings engines report, as gauges: (reading, metric, help, scale)
_GPU_GAUGES = (
    ("temp", "coderai_gpu_temperature_celsius", "GPU temperature", 1),
    ("vram_total_mb", "coderai_gpu_vram_total_bytes", "GPU memory in all", 1 << 20),
    ("vram_used_mb", "coderai_gpu_vram_used_bytes", "GPU memory in use", 1 << 20),
)


def _thermal_families(views: list[EngineView]) -> Iterator[Metric]:
    cooling = GaugeMetricFamily(
        "coderai_engine_cooling", "1 while an engine pauses to cool", labels=["engine", "sensor"]
    )
    gauges = [
        (reading, scale, GaugeMetricFamily(name, text, labels=["engine", "card", "vendor"]))
        for reading, name, text, scale in _GPU_GAUGES
    ]
    for view in views:
        if view.cooldown is not None:
            cooling.add_metric([view.name, str(view.cooldown.get("sensor"))], 1)
        for card, readings in view.gpu_readings.items():
            for reading, scale, family in gauges:
                value = readings.get(reading)
                if value is not None:  # a reading the card does not give is left out
                    family.add_metric([view.name, card, readings["vendor"]], value * scale)
    yield cooling
    for _, _, family in gauges:
        yield family


class LoopHistogram(Collector):
    """A histogram observed from the event loop's thread only: the inter-token latency,
    observed once per event on the hot path (text_relay). A bisect and two additions,
    where prometheus-client's Histogram takes a lock and walks its buckets: 0.12-0.22
    against 0.78-1.07 µs an observation here, about a tenth of the front's whole cost per
    event. Scrapes run on the same thread, so nothing is read half-written."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self.name, self.documentation, self.bounds = name, documentation, buckets
        #: observations per bucket (not cumulative), the last one above every bound
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound counts in that bound's bucket (le)
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def collect(self) -> Iterator[Metric]:
        cumulative = list(accumulate(self.counts))
        # labelled as prometheus-client labels its own histograms' buckets
        bounds = [floatToGoString(b) for b in self.bounds]  # type: ignore[no-untyped-call]
        bounds.append("+Inf")
        yield HistogramMetricFamily(self.name, self.documentation,
                                    buckets=list(zip(bounds, cumulative, strict=True)),
                                    sum_value=self.sum)  # fmt: skip


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "coderai_requests",
            "HTTP requests answered, by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        #: usage per API key (its id; "" without one) and model, as usage.py counts it
        self.key_requests = Counter(
            "coderai_key_requests",
            "API requests that named a model, by API key id and model",
            ["key", "model"],
            registry=self.registry,
        )
        self.key_tokens = Counter(
            "coderai_key_tokens",
            "Prompt and completion tokens by API key id and model",
            ["key", "model", "kind"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "coderai_time_to_first_token_seconds",
            "Request received to first content written, streamed requests",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.itl = LoopHistogram(
            "coderai_inter_token_latency_seconds",
            "Gap between consecutive content writes of a stream",
            _LATENCY_BUCKETS,
        )
        self.registry.register(self.itl)

    def watch(self, dispatcher: Dispatcher, engines: Callable[[], list[EngineView]]) -> None:
        self.registry.register(_StateCollector(dispatcher, engines))

    def render(self) -> bytes:
        return generate_latest(self.registry)
