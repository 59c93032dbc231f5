"""The leaderboard's figure (issue 60 item 4): NIAH accuracy by context for every law, made from
the published runs (report.published.runs) by `make results-page` (report.published: FIGURE with
its CSV; report.published.board links it under the leaderboard with its caption).

Per law, its mean NIAH accuracy at each evaluated context (theta x50, after SFT) over
the seeds that hold every context, with the 95% t-interval as a band (3 seeds or more; fewer: a
dashed line, no band), from the run where the law has the most such seeds (ties: the first of
SOURCES). Its numbers are FIGURE_CSV; the PNG carries their sha256 in its metadata (Source), which
`--check` reads: the check holds the data, not the bytes (another machine's fonts may draw other
bytes), and `make results-page` draws it again (Agg, no date or version in the file: the same
venv gives the same bytes).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ssmax.config.variants import by_letter, color, facts, label, ordered
from ssmax.report.plotting import new_figure
from ssmax.report.published.runs import Run, Source, load_run, sources, span
from ssmax.verdicts.published_file import ROOT
from ssmax.verdicts.stats import Interval

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGURE = ROOT / "docs" / "figures" / "leaderboard_niah.png"
FIGURE_CSV = FIGURE.with_suffix(".csv")
DPI = 110
LEGEND_COLUMNS = 2  # the labels are long ("(m3) dynamic YaRN (interpolation + temperature), ...")
BAND_SEEDS = 3  # fewer seeds: the t-interval spans most of [0, 1]; a dashed line, no band
NIAH_AT = re.compile(r"niah @([\d.]+)x")  # results.json's accuracy at one context (theta x50)


def _rel(path: Path) -> str:
    """A path as docs/results.md links it."""
    return str(path.relative_to(ROOT / "docs"))


@dataclass
class Curve:
    variant: str
    run: Run
    seeds: list[int]
    multiples: list[str]  # as the file names them, in numeric order
    intervals: list[Interval]  # per multiple, over the seeds


def curves(runs: list[Run]) -> list[Curve]:
    """Every law's NIAH accuracy by context, from the run where it has the most seeds holding
    every context (ties: the first run)."""
    best: dict[str, Curve] = {}
    for run in runs:
        for v in run.table:
            if v not in by_letter().values() or not facts(v).evals:
                continue
            columns = run.table[v]
            ks = sorted({m[1] for c in columns if (m := NIAH_AT.fullmatch(c))}, key=float)
            if len(ks) < 2:
                continue
            seeds = sorted(set.intersection(*(set(columns[f"niah @{k}x"]) for k in ks)))
            if seeds and (v not in best or len(seeds) > len(best[v].seeds)):
                values = [[columns[f"niah @{k}x"][s] for s in seeds] for k in ks]
                best[v] = Curve(v, run, seeds, ks, [Interval.of(x) for x in values])
    return [best[v] for v in ordered(list(best))]


CSV_COLUMNS = ["law", "variant", "run", "seeds", "context (x N)", "n", "mean", "lo95", "hi95"]


def figure_csv(found: list[Curve]) -> str:
    """The figure's numbers, a row per law and context."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for c in found:
        files = c.run.named
        for k, i in zip(c.multiples, c.intervals, strict=True):
            writer.writerow([f"({facts(c.variant).letter})", c.variant, files, span(c.seeds), k,
                             i.n, *(_num(x) for x in (i.mean, i.lo, i.hi))])  # fmt: skip
    return buffer.getvalue()


def _num(x: float) -> str:
    return "" if x != x else f"{x:.6f}"  # nan: no interval (1 seed)


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def figure_caption(found: list[Curve]) -> str:
    if not found:
        return "No law of these runs has NIAH accuracy per context."
    each = "; ".join(f"{label(c.variant)}: {c.run.named}, seeds "
                     f"{span(c.seeds)} ({len(c.seeds)})" for c in found)  # fmt: skip
    return (f"NIAH accuracy (full number, 20 prompts a context and seed) by context, a multiple "
            f"of the training length, RoPE theta x50, after SFT: the mean over the seeds that "
            f"hold every context, with its 95% t-interval as a band ({BAND_SEEDS} seeds or "
            f"more; fewer: dashed, no band). {each}. Numbers: "
            f"[{_rel(FIGURE_CSV)}]({_rel(FIGURE_CSV)}).")  # fmt: skip


def figure(found: list[Curve]) -> Figure:
    """A line per law (its facts' label and colour) with its band; the legend below in two
    columns, the figure taller by its rows, so that every label fits inside it (three columns
    of 18 laws ran past both edges)."""
    rows = math.ceil(len(found) / LEGEND_COLUMNS)
    fig, (ax,) = new_figure(1, width=8.0, height=4.6 + 0.17 * rows)
    ticks: set[float] = set()
    for c in found:
        xs = [float(k) for k in c.multiples]
        ticks |= set(xs)
        band = len(c.seeds) >= BAND_SEEDS
        name = f"{label(c.variant)} ({len(c.seeds)} seeds{'' if band else ', no band'})"
        ax.plot(xs, [i.mean for i in c.intervals], marker="o", ms=3, lw=1.4,
                ls="-" if band else "--", color=color(c.variant), label=name)  # fmt: skip
        if band:
            lo = [max(0.0, i.lo) for i in c.intervals]
            hi = [min(1.0, i.hi) for i in c.intervals]
            ax.fill_between(xs, lo, hi, color=color(c.variant), alpha=0.1, lw=0)
    ax.set_xticks(sorted(ticks), [f"{x:g}x" for x in sorted(ticks)])
    n = {c.run.pub.run["train_len"] for c in found}
    ax.set(xlabel=f"context (multiple of the training length N = {', '.join(map(str, n))} "
           "tokens), RoPE theta x50, after SFT", ylabel="NIAH accuracy", ylim=(-0.02, 1.02),
           xlim=(0.5, max(ticks, default=1) + 0.5))  # fmt: skip
    ax.set_title("NIAH accuracy by context: mean over seeds, 95% t-interval", fontsize=10)
    ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncols=LEGEND_COLUMNS, fontsize=7, frameon=False)
    return fig


def draw(found: list[Curve], csv_text: str) -> bytes:
    """The PNG of figure(found), the data's digest in its metadata, no date or software
    version (the same venv draws the same bytes)."""
    buffer = io.BytesIO()
    figure(found).savefig(buffer, format="png", dpi=DPI,
                          metadata={"Software": None, "Source": digest(csv_text)})  # fmt: skip
    return buffer.getvalue()


def png_source(path: Path) -> str | None:
    """The Source text of a PNG's metadata (the digest of the numbers it was drawn from)."""
    from PIL import Image  # matplotlib's own dependency

    with Image.open(path) as image:
        return image.text.get("Source")


def figure_files(runs: list[Source] | None = None) -> tuple[str, list[Curve]]:
    """(the CSV's text, the curves) of the runs (None: sources())."""
    found = curves([r for r in (load_run(s) for s in (sources() if runs is None else runs)) if r])
    return figure_csv(found), found


def figure_stale(csv_text: str, png: Path = FIGURE, table: Path = FIGURE_CSV) -> bool:
    """Whether the committed figure is not the one these numbers give."""
    if not table.is_file() or table.read_text() != csv_text or not png.is_file():
        return True
    return png_source(png) != digest(csv_text)
