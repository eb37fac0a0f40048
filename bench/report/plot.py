"""What the report's line plots share: one line per design against the stream count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt


def streams_panel(ax: Any, lines: dict[str, list[dict[str, Any]]], key: str, xlabel: str) -> None:
    """One line per label: `key` of its rows against their concurrency (log scale)."""
    for label, rows in lines.items():
        rows = sorted(rows, key=lambda r: r["concurrency"])
        ax.plot([r["concurrency"] for r in rows], [r[key] for r in rows], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)


def save(fig: Any, plots: Path, name: str, dpi: int) -> str:
    fig.tight_layout()
    plots.mkdir(exist_ok=True)
    fig.savefig(plots / name, dpi=dpi)
    plt.close(fig)
    return name
