"""/metrics in the Prometheus text format (prometheus-client).

Counters and histograms are updated where things happen (one observation per request or
per write, never per token); gauges of current state are read from the dispatcher and the
supervisor when scraped, so there is no second copy of that state to keep in step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from coderai.front.dispatcher import Dispatcher
from coderai.front.engine_view import EngineView

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


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "coderai_requests",
            "HTTP requests answered, by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "coderai_time_to_first_token_seconds",
            "Request received to first content written, streamed requests",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.itl = Histogram(
            "coderai_inter_token_latency_seconds",
            "Gap between consecutive content writes of a stream",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )

    def watch(self, dispatcher: Dispatcher, engines: Callable[[], list[EngineView]]) -> None:
        self.registry.register(_StateCollector(dispatcher, engines))

    def render(self) -> bytes:
        return generate_latest(self.registry)
