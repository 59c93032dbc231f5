"""Figs. 4-6 from the runs: learning curves (MLflow), per-position loss, NIAH heatmaps.

Several seeds: curves and grids are the mean over seeds (Fig. 4 on the steps all seeds have).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ssmax.config.variants import color, facts
from ssmax.report.gather import metric_history, read_loss_csv
from ssmax.report.plotting import FigureFile, label, new_figure, save, smooth
from ssmax.verdicts.results import Results


def curve_variants(results: Results) -> list[str]:
    """Fig. 4's variants: those whose facts say curve: true."""
    return [v for v in results.variants("pretrain") if facts(v).curve]


def _seeds_note(seeds: list[list[int]]) -> str:
    counts = sorted({len(s) for s in seeds})
    return "one seed" if counts == [1] else f"mean over seeds ({'/'.join(map(str, counts))})"


def learning_curves(results: Results) -> dict[str, tuple[np.ndarray, np.ndarray, list[int]]]:
    """variant -> (steps, mean train loss over seeds on common steps, seeds)."""
    uri, out = results.settings.tracking_uri, {}
    for variant in curve_variants(results):
        histories = {
            seed: h
            for seed, o in results.get("pretrain", variant).items()
            if (h := metric_history(uri, o.run_id)) is not None
        }
        if not histories:
            continue
        common = sorted(set.intersection(*(set(s.tolist()) for s, _ in histories.values())))
        mean = np.mean(
            [[dict(zip(s, v, strict=True))[t] for t in common] for s, v in histories.values()], 0
        )
        out[variant] = (np.array(common), mean, sorted(histories))
    return out


def fig4(results: Results, folder: Path) -> FigureFile:
    title = "Fig. 4: pretraining learning curves, (a)-(d)"
    curves = learning_curves(results)
    if not curves:
        return FigureFile("fig4", title, missing="no train/loss history in MLflow")
    window = max(1, max(s.size for s, _, _ in curves.values()) // 25)
    fig, (ax,) = new_figure(width=6.0)
    smoothed = {}
    for variant, (steps, loss, _) in curves.items():
        smoothed[variant] = dict(zip(steps.tolist(), smooth(loss, window), strict=True))
        ax.plot(steps, smoothed[variant].values(), color=color(variant), label=label(variant))
    ax.set(xlabel="step", ylabel="train loss (smoothed)")
    ax.legend()
    ax.grid(alpha=0.3)
    steps = sorted(set().union(*smoothed.values()))
    rows = ([t, *(smoothed[v].get(t) for v in curves)] for t in steps)
    png, csv = save(fig, folder, "fig4", ["step", *curves], rows)
    caption = (
        f"MLflow train/loss of each pretraining run, {_seeds_note([c[2] for c in curves.values()])}"
        f", centred moving average over {window} logged points."
    )
    final = {v: list(d.values())[-1] for v, d in smoothed.items()}
    measured = "Final smoothed train loss: " + ", ".join(
        f"{label(v)} {x:.4f}" for v, x in final.items()
    )
    return FigureFile("fig4", title, caption, png, csv, measured=measured + ".")


# panel -> its CSV of eval_loss's outputs (facts_csv: None without planted facts)
FIG5_SERIES: dict[str, Callable[[Any], str | None]] = {
    "prose": lambda o: o.csv, "planted facts": lambda o: o.facts_csv}  # fmt: skip


def loss_curves(
    results: Results, csv: Callable[[Any], str | None]
) -> tuple[dict[str, np.ndarray], list[list[int]]]:
    """variant -> per-position loss (mean over seeds) from eval_loss's CSV `csv(outputs)`."""
    curves, seeds = {}, []
    for variant in results.variants("eval_loss"):
        runs = {s: read_loss_csv(csv(o)) for s, o in results.get("eval_loss", variant).items()}
        runs = {s: v for s, v in runs.items() if v is not None}
        if runs:
            size = min(v.size for v in runs.values())
            curves[variant] = np.mean([v[:size] for v in runs.values()], axis=0)
            seeds.append(sorted(runs))
    return curves, seeds


def fig5(results: Results, folder: Path) -> FigureFile:
    title = "Fig. 5: per-position test loss, RoPE theta x50, (a)-(f)"
    n_train = results.settings.train_len
    panels = {name: loss_curves(results, csv) for name, csv in FIG5_SERIES.items()}
    panels = {name: p for name, p in panels.items() if p[0]}
    if not panels:
        return FigureFile("fig5", title, missing="no eval_loss results")
    # The window grows with the position (a quarter of it): per-position noise is the same
    # everywhere, but the curve's detail sits at short contexts; few sequences at small presets.
    fig, axes = new_figure(len(panels), width=6.0)
    columns, series = ["context"], []
    for ax, (name, (curves, _)) in zip(axes, panels.items(), strict=True):
        for variant, c in curves.items():
            y = smooth(c, np.arange(1, c.size + 1) // 4)
            ax.plot(np.arange(1, y.size + 1), y, color=color(variant), label=label(variant), lw=1)
            prefix = "" if name == "prose" else "facts_"
            columns += [f"{prefix}{variant}", f"{prefix}{variant}_raw"]
            series += [y, c]
        ax.axvline(n_train, color="k", ls="--", lw=1, label=f"training length {n_train}")
        ax.set(xlabel="context size (position)", ylabel="test loss (smoothed)", title=name)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    length = max(y.size for y in series)
    rows = ([i + 1, *(y[i] if i < y.size else None for y in series)] for i in range(length))
    png, csv = save(fig, folder, "fig5", columns, rows)
    measured = "; ".join(
        f"{name}: "
        + ", ".join(
            f"{label(v)} " + "/".join(f"{x:.2f}" for x in at_multiples(c, n_train))
            for v, c in curves.items()
        )
        for name, (curves, _) in panels.items()
    )
    at = "/".join(f"{k}x" for k in MULTIPLES)
    measured = f"Loss at {at} of the training length ({measured})."
    seeds = [s for _, seeds in panels.values() for s in seeds]
    caption = (
        f"Loss at each position of held-out sequences with theta x50, {_seeds_note(seeds)}, "
        "centred moving average over a quarter of the position (n/8 each side); dashed: the "
        "training length. Prose: the test split as it is. Planted facts (when the run trained "
        "on them): the same prose with facts and questions at the training density, a question "
        "up to the whole length after its fact."
    )
    return FigureFile("fig5", title, caption, png, csv, measured=measured)


MULTIPLES = (1, 5, 10, 20)  # Fig. 5's summary points, as in the results table


def at_multiples(curve: np.ndarray, n_train: int) -> list[float]:
    """Mean loss over ((k-1)N, kN] for each k in MULTIPLES that the curve reaches."""
    return [
        float(curve[(k - 1) * n_train : k * n_train].mean())
        for k in MULTIPLES
        if (k - 1) * n_train < curve.size
    ]


def niah_grids(results: Results) -> dict[str, tuple[list, list, np.ndarray, int]]:
    """variant -> (context multiples, depths, mean full-accuracy grid over seeds, seeds)."""
    out = {}
    for variant in results.variants("eval_niah"):
        runs = list(results.get("eval_niah", variant).values())
        if runs:
            grid = np.mean([np.array(o.accuracy_grid, dtype=float) for o in runs], axis=0)
            out[variant] = (runs[0].context_multiples, runs[0].depths, grid, len(runs))
    return out


def fig6(results: Results, folder: Path) -> FigureFile:
    title = "Fig. 6: needle-in-a-haystack accuracy, after SFT, theta x50"
    grids = niah_grids(results)
    if not grids:
        return FigureFile("fig6", title, missing="no eval_niah results")
    fig, axes = new_figure(len(grids), width=4.0, height=3.2)
    for ax, (variant, (ctx, depths, grid, _)) in zip(axes, grids.items(), strict=True):
        image = ax.imshow(grid.T, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto", origin="upper")
        ax.set_xticks(range(len(ctx)), [f"{m}x" for m in ctx])
        ax.set_yticks(range(len(depths)), [f"{d:.0%}" for d in depths])
        for (i, j), value in np.ndenumerate(grid):  # the numbers, as in the paper's heatmaps
            ax.text(i, j, f"{value:.2f}", ha="center", va="center", fontsize=7)
        ax.set(xlabel="context (x training length)", ylabel="depth")
        ax.set_title(f"{label(variant)}: mean {grid.mean():.2f}", fontsize=10)
    fig.colorbar(image, ax=axes, shrink=0.8, label="accuracy (full number)")
    first = next(iter(grids.values()))
    rows = (
        [m, d, *(g[2][i, j] for g in grids.values())]
        for i, m in enumerate(first[0])
        for j, d in enumerate(first[1])
    )
    png, csv = save(fig, folder, "fig6", ["context_multiple", "depth", *grids], rows)
    seeds = sorted({g[3] for g in grids.values()})
    caption = (
        f"Share of samples whose full 7-digit number was retrieved, per context size (x the "
        f"training length) and needle depth; mean over {'/'.join(map(str, seeds))} seed(s)."
    )
    measured = (
        "Mean over depths at "
        + "/".join(f"{m}x" for m in first[0])
        + ": "
        + "; ".join(
            f"{label(v)} " + " ".join(f"{x:.2f}" for x in g[2].mean(1)) for v, g in grids.items()
        )
    )
    return FigureFile("fig6", title, caption, png, csv, measured=measured + ".")
