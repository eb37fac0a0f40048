"""The front's lockless histogram exposes what prometheus-client's own would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from coderai.front.metrics import LoopHistogram

BUCKETS = (0.001, 0.005, 0.01, 1.0, 30.0)


def exposition(registry: CollectorRegistry) -> list[str]:
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]  # only the library's has it


def test_the_same_observations_give_the_same_exposition() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("gap_seconds", "A gap", buckets=BUCKETS, registry=theirs)
    histogram = LoopHistogram("gap_seconds", "A gap", BUCKETS)
    ours.register(histogram)
    # below, on and between bounds, and past the last one
    for value in (0.0, 0.0005, 0.001, 0.003, 0.005, 0.2, 1.0, 29.0, 30.0, 31.0, 900.0):
        reference.observe(value)
        histogram.observe(value)
    assert exposition(ours) == exposition(theirs)
    assert 'gap_seconds_bucket{le="0.001"} 3.0' in exposition(ours)
    assert 'gap_seconds_bucket{le="+Inf"} 11.0' in exposition(ours)


def test_an_empty_histogram_is_exposed_with_zero_counts() -> None:
    registry = CollectorRegistry()
    registry.register(LoopHistogram("gap_seconds", "A gap", BUCKETS))
    assert "gap_seconds_count 0.0" in exposition(registry)
