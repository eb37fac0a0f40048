"""Order statistics the benchmark scripts report."""

from __future__ import annotations


def percentile(values: list[float], q: float) -> float:
    """The value below which a share `q` of `values` lies (nearest rank); NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
