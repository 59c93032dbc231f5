"""Every figure of the paper (Figs. 1-8) as PNG + CSV in the report folder.

Figs. 1 and 3 come from the formulas (the report's own); the others from the runs, each named
by the stage whose outputs it draws (StageSpec.figures: Fig. 2, the rationale model's learned
p_n, and Fig. 4 by pretrain; Figs. 5-8, ``figures_runs``, ``figures_needle``, by the evals). A
figure whose inputs are missing is returned with ``missing`` set instead of files.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ssmax.report.formulas import fig1_max_output, fig3_transformed
from ssmax.report.paper import PAPER
from ssmax.report.plotting import FigureFile, new_figure, save
from ssmax.verdicts.pn_fit import pn_fits
from ssmax.verdicts.results import Results

FIG1_S = 0.43
FIG3_S = (0.43, 1.0)  # the paper does not give Fig. 3's two values of s
FIG3_N = (10, 100, 1_000, 10_000, 100_000)
PAPER_FIT = (0.0283, 0.394)  # Fig. 2: p_n ~ 0.0283 log n + 0.394


def fig1(results: Results, folder: Path) -> FigureFile:
    n = np.unique(np.round(np.logspace(0, 6, 300)))
    soft, ss = fig1_max_output(n, None), fig1_max_output(n, FIG1_S)
    fig, (ax,) = new_figure()
    ax.plot(n, soft, label="Softmax", color="C3")
    ax.plot(n, ss, label=f"SSMax (s = {FIG1_S})", color="C0")
    ax.set(xscale="log", xlabel="input size n", ylabel="max output", ylim=(-0.02, 1.02))
    ax.legend()
    ax.grid(alpha=0.3)
    png, csv = save(
        fig, folder, "fig1", ["n", "softmax", f"ssmax_s{FIG1_S}"], zip(n, soft, ss, strict=True)
    )
    measured = (
        f"Computed from Eqs. 1-2: at n = {n[-1]:,.0f} Softmax gives {soft[-1]:.2g}, SSMax "
        f"{ss[-1]:.3f}."
    )
    return FigureFile(
        "fig1", "Fig. 1: max output vs input size", "Input -2 everywhere except one +3 (Eq. 1, "
        f"2). Softmax fades towards 0 as n grows; SSMax (s = {FIG1_S}) tends to 1.", png, csv,
        measured=measured,
    )  # fmt: skip


def fig2(results: Results, folder: Path) -> FigureFile:
    title = "Fig. 2: learned p_n and its log fit"
    fits = pn_fits(results)
    if not fits:
        return FigureFile("fig2", title, missing="no pn_rationale weights with p_n")
    seed, (p, fit) = next(iter(sorted(fits.items())))
    n = np.arange(1, p.size + 1)
    fig, (ax,) = new_figure()
    ax.plot(n, p, ".", ms=3, color="C0", label="learned p_n")
    ax.plot(n, fit(n), color="C3", label=f"{fit.a1:.4f} log n + {fit.a2:.4f} (R² {fit.r2:.3f})")
    ax.set(xscale="log", xlabel="n", ylabel="p_n")
    ax.legend()
    ax.grid(alpha=0.3)
    png, csv = save(fig, folder, "fig2", ["n", "p_n", "fit"], zip(n, p, fit(n), strict=True))
    caption = (
        f"Seed {seed}. Least-squares fit over n = {fit.n_min}..{p.size} (p_1 gets no gradient): "
        f"a1 = {fit.a1:.4f}, a2 = {fit.a2:.4f}, R² = {fit.r2:.3f}. Paper: "
        f"{PAPER_FIT[0]} log n + {PAPER_FIT[1]} after 25k iterations at N = 1024."
    )
    measured = f"{fit.a1:.4f} log n + {fit.a2:.4f}, R² {fit.r2:.3f} at N = {p.size} (seed {seed})."
    return FigureFile("fig2", title, caption, png, csv, measured=measured)


def fig3(results: Results, folder: Path) -> FigureFile:
    z = np.linspace(-1.0, 15.0, 321)
    panels = [("Softmax", None), *((f"SSMax s = {s}", s) for s in FIG3_S)]
    fig, axes = new_figure(len(panels), width=4.2)
    columns, series = ["z_max"], [z]
    for ax, (name, s) in zip(axes, panels, strict=True):
        for i, n in enumerate(FIG3_N):
            y = fig3_transformed(z, n, s)
            ax.plot(z, y, color=f"C{i}", label=f"n = {n:,}")
            columns.append(f"softmax_n{n}" if s is None else f"ssmax_s{s}_n{n}")
            series.append(y)
        ax.set(title=name, xlabel="z_max", ylabel="output at z_max", ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    png, csv = save(fig, folder, "fig3", columns, zip(*series, strict=True))
    caption = (
        "Input (0, 1/(n-2), ..., 1, z_max). Under Softmax the z_max needed to take the "
        "attention grows with log n; under SSMax it is about 1 + 1/s for every n. "
        f"The paper does not state its two s; here s = {FIG3_S[0]} and {FIG3_S[1]}."
    )
    measured = "Computed from Eqs. 1-2 (the formulas, no model)."
    return FigureFile(
        "fig3", "Fig. 3: transformed z_max vs z_max", caption, png, csv, measured=measured
    )


Figure = Callable[[Results, Path], FigureFile]
OWN = (fig1, fig3)  # from the formulas: no stage's outputs


def figure(name: str) -> Figure:
    """A figure function named as a stage declares it: `module.function` of ssmax.report."""
    module, _, function = name.rpartition(".")
    return getattr(importlib.import_module(f"ssmax.report.{module}"), function)


def all_figures(declared: tuple[str, ...]) -> list[Figure]:
    """The report's own figures and those the stages declare, in the paper's order (figN;
    a name without a number last)."""

    def number(make: Figure) -> tuple[float, str]:
        found = re.search(r"\d+", make.__name__)
        return (int(found[0]) if found else float("inf")), make.__name__

    return sorted(dict.fromkeys([*OWN, *map(figure, declared)]), key=number)


def make_figures(results: Results, folder: Path, declared: tuple[str, ...]) -> list[FigureFile]:
    """Every figure (declared: the stages', ssmax.report.declared.Declared.figures); one that
    fails to draw is reported as missing with the error."""
    out = []
    for make in all_figures(declared):
        key = make.__name__
        try:
            made = make(results, folder)
        except Exception as err:  # noqa: BLE001 - a broken figure must not sink the report
            made = FigureFile(key, key, missing=f"{type(err).__name__}: {err}")
        made.paper = PAPER.get(key, "")
        out.append(made)
    return out
