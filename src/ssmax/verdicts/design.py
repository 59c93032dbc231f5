"""A reduced preset's design criteria (preset.design), checked on the run's results.

A CPU scale answers the paper's needle questions only where there is something to compare:
every variant retrieves at the training length under RoPE theta x50, and the context grid
reaches far enough that retrieval fails. The preset states both, and the seeds it was designed
on, before any comparison of variants; the report says whether they are met. Neither
criterion compares variants: the first is a floor for each, the second asks of the best.
Verdicts are for the other seeds (the report names any design seed among them).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from ssmax.config.variants import facts
from ssmax.verdicts.metrics import values_of
from ssmax.verdicts.results import Design, Results

DESIGN_COLUMNS = ["criterion (preset.design)", "over the design seeds", "met",
                  "over this run's seeds (information)"]  # fmt: skip


def _mean_over(values: dict[int, float], seeds: Sequence[int]) -> tuple[float | None, int]:
    """Mean of the values of the given seeds, and how many of them there were."""
    have = [values[s] for s in seeds if s in values]
    return (statistics.fmean(have) if have else None), len(have)


def design_rows(results: Results, design: Design, variants: Sequence[str]) -> list[list[str]]:
    """One row per variant evaluated with NIAH (its mean at 1x), then one for the grid's reach;
    'met' is yes / no / '-' (no value from the design seeds in this run). The last column is
    the same over every seed of this run: how the criteria fare on the seeds that decide the
    claims (a verdict run has no design seed), not a test."""
    out, seeds = [], design.seeds
    at_1x = {v: values_of(results, "niah@1", v) for v in variants}
    evaluated = [v for v in variants if at_1x[v]]
    for variant in evaluated:
        values = at_1x[variant]
        label = f"({facts(variant).letter}) NIAH at 1x >= {design.niah_at_1x:g}"
        got, met = _floor(values, seeds, design.niah_at_1x)
        out.append([label, got, met, _joined(*_floor(values, sorted(values), design.niah_at_1x))])
    for variant in evaluated:  # per seed (issue 58): did the skill form at all in each?
        out.append(seed_row(at_1x[variant], seeds, variant, design.falls_below))
    multiples = niah_multiples(results, evaluated)
    if multiples:
        top = f"{multiples[-1]:g}"
        label = f"the best variant's NIAH at the largest context ({top}x) < {design.falls_below:g}"
        values = {v: values_of(results, f"niah@{top}", v) for v in evaluated}
        got, met = _best_below(values, seeds, design.falls_below)
        out.append([label, got, met, _joined(*_best_below(values, None, design.falls_below))])
    return out


def seed_row(
    values: dict[int, float], seeds: Sequence[int], variant: str, floor: float
) -> list[str]:
    """Whether a variant formed the skill at the training length in each seed: NIAH at 1x at
    least the bound at which the preset calls retrieval lost (design.falls_below). A seed that
    fails it stays in every verdict; the report says where."""
    label = f"({facts(variant).letter}) NIAH at 1x >= {floor:g} in each seed (the skill formed)"
    design = [s for s in seeds if s in values]
    failed = [s for s in design if values[s] < floor]
    got = f"{len(design) - len(failed)} of {len(design)} seeds" if design else "-"
    met = "-" if not design else "no" if failed else "yes"
    missed = [f"{s} ({values[s]:.2f})" for s in sorted(values) if values[s] < floor]
    run = f"not in seed {', '.join(missed)}" if missed else f"every seed ({len(values)})"
    return [label, got, met, run]


def failed_seeds(results: Results, variants: Sequence[str], floor: float) -> list[int]:
    """The run's seeds in which some variant did not form the skill (seed_row)."""
    at_1x = [values_of(results, "niah@1", v) for v in variants]
    return sorted({s for values in at_1x for s, x in values.items() if x < floor})


def without_failed(
    results: Results, variants: Sequence[str], floor: float,
    judge: Callable[[Results], Sequence[Any]],
) -> tuple[list[int], list[str]]:  # fmt: skip
    """(the seeds where a variant did not form the skill, the claims' verdicts without them,
    by judge). Information beside the verdicts, never instead: a failed seed stays in them."""
    failed = failed_seeds(results, variants, floor)
    return failed, ([c.verdict for c in judge(results.without(failed))] if failed else [])


def niah_multiples(results: Results, variants: Sequence[str]) -> list[float]:
    """The context multiples (theta x50) of the variants' NIAH grids: from the nodes' outputs,
    or a table's columns `niah @<k>x`."""
    if results.table is not None:
        names = (m for v in variants for m in results.table.get(v, {}))
        return sorted({float(f[1]) for n in names if (f := re.fullmatch(r"niah @([\d.]+)x", n))})
    return sorted({float(k) for v in variants for o in results.get("eval_niah", v).values()
                   for k in o.accuracy})  # fmt: skip


def _floor(values: dict[int, float], seeds: Sequence[int], floor: float) -> tuple[str, str]:
    """(mean over the seeds and how many had one, met) of a variant's floor; '-' without."""
    mean, n = _mean_over(values, seeds)
    if mean is None:
        return "-", "-"
    return f"{mean:.3f} ({n} of {len(seeds)} seeds)", "yes" if mean >= floor else "no"


def _best_below(
    values: dict[str, dict[int, float]], seeds: Sequence[int] | None, bound: float
) -> tuple[str, str]:
    """(the best variant and its mean over the seeds, met: below bound); seeds None: each
    variant's own; '-' without."""
    means = {v: _mean_over(x, sorted(x) if seeds is None else seeds)[0] for v, x in values.items()}
    known = {v: m for v, m in means.items() if m is not None}
    if not known:
        return "-", "-"
    best = max(known, key=known.__getitem__)
    return f"({facts(best).letter}) {known[best]:.3f}", "yes" if known[best] < bound else "no"


def _joined(got: str, met: str) -> str:
    """The information column's cell: 'value: met', or '-'."""
    return "-" if got == "-" else f"{got}: {met}"


def overlap_line(design: Design, seeds: Sequence[int]) -> str:
    """A sentence where the run's seeds include design seeds (their verdicts are not
    independent of the design); '' otherwise."""
    shared = sorted(set(design.seeds) & set(seeds))
    if not shared:
        return ""
    return (f"Seeds {shared} are design seeds of this preset: verdicts that include them are "
            "not independent of the design; decide claims on other seeds.")  # fmt: skip
