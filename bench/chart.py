"""PNG charts of a workload's rows, drawn with matplotlib when it is installed.

One group of bars per row (configuration): nanotc's GFLOP/s and each peer's, side by side,
with nanotc's percentage of the measured peak written above its bar. `draw` returns None
without matplotlib, so the suite runs the same without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.harness import Row, peer_order


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def label(row: Row) -> str:
    name = f"{row.workload}/{row.variant}" if row.variant else row.workload
    return f"{name}\n{row.shape} {row.dtype} t{row.threads}"


def draw(rows: Sequence[Row], title: str, path: Path) -> Path | None:
    """Write the chart of `rows` to `path` (PNG); None when matplotlib is missing."""
    if not rows or not available():
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    series = ["nanotc", *peer_order(rows)]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) * len(series) / 2 + 2), 4.5))
    for s, name in enumerate(series):
        xs, heights = [], []
        for i, row in enumerate(rows):
            timing = row.nanotc if name == "nanotc" else row.peers.get(name)
            if timing is not None:
                xs.append(i + (s - (len(series) - 1) / 2) * width)
                heights.append(row.gflops(timing))
        bars = ax.bar(xs, heights, width, label=name)
        if name == "nanotc":
            percents = [r.percent_peak for r in rows]
            texts = [f"{p:.0f}%" if p is not None else "" for p in percents]
            ax.bar_label(bars, labels=texts, fontsize=7, padding=2)
    ax.set_xticks(range(len(rows)), [label(r) for r in rows], fontsize=7, rotation=45, ha="right")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"{title} (nanotc bars: % of measured peak)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
