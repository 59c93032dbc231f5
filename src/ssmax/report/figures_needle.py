"""Figs. 7 and 8 from eval_niah's needle scores (Sec. 3.4), the lowest seed of each variant."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.ticker import MaxNLocator

from ssmax.evals.haystack import NEEDLE
from ssmax.report.gather import read_needle_map, read_needle_trials
from ssmax.report.plotting import FigureFile, label, new_figure, save, variant_axes
from ssmax.verdicts.results import Results

TOP_HEADS = 25  # Fig. 7 shows the 25 highest-scoring heads
MARKERS = {  # Fig. 8's outcome markers
    "full": ("o", "C2", "full number"),
    "first_digit": ("^", "C1", "first digit only"),
    "wrong": ("x", "C3", "wrong"),
}


def fig7(results: Results, folder: Path) -> FigureFile:
    title = "Fig. 7: needle score per layer/head, sorted (top 25)"
    maps, seeds, needle = {}, set(), None
    for variant in results.variants("eval_niah"):
        first = results.first("eval_niah", variant)
        rows = read_needle_map(first[1]) if first else None
        if rows:
            maps[variant] = sorted(rows, key=lambda r: -r[2])[:TOP_HEADS]
            seeds.add(first[0])
            needle = first[1].needle_scores
    if not maps:
        return FigureFile("fig7", title, missing="no needle score maps (eval_niah)")
    fig, axes = new_figure(len(maps), width=4.2, height=3.0)
    top = max(r[2] for rows in maps.values() for r in rows)
    for ax, (variant, rows) in zip(axes, maps.items(), strict=True):
        ax.bar(range(len(rows)), [r[2] for r in rows], color="C0")
        ax.set_xticks(range(len(rows)), [f"L{r[0]}H{r[1]}" for r in rows], rotation=90, fontsize=6)
        ax.set(ylabel="needle score", ylim=(0, max(1e-3, top) * 1.05))
        variant_axes(ax, variant)
    length = max(len(r) for r in maps.values())
    columns = ["rank", *(c for v in maps for c in (v, f"{v}_head"))]
    rows = ([k + 1, *(c for r in maps.values() for c in _head_cells(r, k))] for k in range(length))
    png, csv = save(fig, folder, "fig7", columns, rows)
    sentence = NEEDLE.format(city=needle.city, number=needle.number)
    caption = (
        f"Attention of the first answer token on the needle's number, every layer (L) and head "
        f"(H), highest first; context {needle.context} tokens, depth {needle.depth:.0%}, "
        f'"{sentence}", theta x50, after SFT; seed {_seeds(seeds)}.'
    )
    measured = "Highest needle score: " + ", ".join(
        f"{label(v)} {rows[0][2]:.3f}" for v, rows in maps.items()
    )
    return FigureFile("fig7", title, caption, png, csv, measured=measured + ".")


def _head_cells(rows: list[tuple[int, int, float]], k: int) -> tuple:
    return (rows[k][2], f"L{rows[k][0]}H{rows[k][1]}") if k < len(rows) else (None, None)


def _seeds(seeds: set[int]) -> str:
    return ", ".join(map(str, sorted(seeds)))


def fig8(results: Results, folder: Path) -> FigureFile:
    title = "Fig. 8: top needle score of each trial, sorted, with the retrieval outcome"
    trials, seeds, context = {}, set(), None
    for variant in results.variants("eval_niah"):
        first = results.first("eval_niah", variant)
        rows = read_needle_trials(first[1]) if first else None
        if rows:
            trials[variant] = sorted(rows, key=lambda t: -t["top_score"])
            seeds.add(first[0])
            context = first[1].needle_scores.context
    if not trials:
        return FigureFile("fig8", title, missing="no needle score trials (eval_niah)")
    fig, axes = new_figure(len(trials), width=4.2, height=3.0)
    top = max(t["top_score"] for rows in trials.values() for t in rows)
    for ax, (variant, rows) in zip(axes, trials.items(), strict=True):
        ranks = np.arange(1, len(rows) + 1)
        for outcome, (marker, color, name) in MARKERS.items():
            picked = [
                (r, t["top_score"])
                for r, t in zip(ranks, rows, strict=True)
                if t["score"] == outcome
            ]
            if picked:
                ax.scatter(*zip(*picked, strict=True), marker=marker, color=color, s=14, label=name)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="trial (sorted)", ylabel="top needle score", ylim=(0, max(1e-3, top) * 1.05))
        variant_axes(ax, variant, f"{label(variant)}: {_full_share(rows)} full")
        ax.legend(fontsize=7)
    length = max(len(r) for r in trials.values())
    columns = ["rank", *(c for v in trials for c in (v, f"{v}_outcome"))]
    rows_out = (
        [k + 1, *(c for r in trials.values() for c in _trial_cells(r, k))] for k in range(length)
    )
    png, csv = save(fig, folder, "fig8", columns, rows_out)
    caption = (
        f"{length} trials per model (random city, number, depth), context {context} tokens, "
        f"theta x50, after SFT; markers: full number / first digit only / wrong; "
        f"seed {_seeds(seeds)}."
    )
    measured = "Mean top needle score (full answers): " + ", ".join(
        f"{label(v)} {np.mean([t['top_score'] for t in rows]):.3f} ({_full_share(rows)})"
        for v, rows in trials.items()
    )
    return FigureFile("fig8", title, caption, png, csv, measured=measured + ".")


def _full_share(rows: list[dict]) -> str:
    return f"{sum(t['score'] == 'full' for t in rows)}/{len(rows)}"


def _trial_cells(rows: list[dict], k: int) -> tuple:
    return (rows[k]["top_score"], rows[k]["score"]) if k < len(rows) else (None, None)
