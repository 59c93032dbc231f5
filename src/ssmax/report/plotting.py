"""Shared figure plumbing: Agg rendering, one PNG plus one CSV of its numbers per figure."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI

import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ssmax.config.variants import label  # noqa: E402 - a variant's label is in its YAML (facts)


@dataclass
class FigureFile:
    """One figure of the report: its files, or why it is missing (then png is None)."""

    key: str  # fig1 .. fig8: also the file names
    title: str
    caption: str = ""
    png: Path | None = None
    csv: Path | None = None
    missing: str | None = None
    paper: str = ""  # what the paper reports in this figure
    measured: str = ""  # the same quantities in this run, in words and numbers


def new_figure(panels: int = 1, width: float = 5.0, height: float = 3.6) -> tuple[Figure, list]:
    """A figure (no pyplot state) with up to 3 panels a row."""
    cols = min(panels, 3)
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes[:panels]


def save(
    fig: Figure, folder: Path, key: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> tuple[Path, Path]:
    """Write key.png and key.csv (the plotted numbers; empty cells where a series has none)."""
    folder.mkdir(parents=True, exist_ok=True)
    png, table = folder / f"{key}.png", folder / f"{key}.csv"
    fig.savefig(png, dpi=110)
    with open(table, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows([_cell(v) for v in row] for row in rows)
    return png, table


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.8g}"
    return value


def smooth(values: np.ndarray, window: int | np.ndarray) -> np.ndarray:
    """Centred moving average; shorter windows at the ends (no shift, no padding bias).
    window: one width, or one width per point."""
    window = np.maximum(1, np.broadcast_to(np.asarray(window, dtype=np.int64), values.shape))
    csum = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
    idx = np.arange(values.size)
    lo = np.clip(idx - window // 2, 0, values.size)
    hi = np.clip(idx + window - window // 2, 0, values.size)
    return (csum[hi] - csum[lo]) / (hi - lo)


def variant_axes(ax: Axes, variant: str, title: str | None = None) -> None:
    ax.set_title(title or label(variant), fontsize=10)
    ax.grid(alpha=0.3)
