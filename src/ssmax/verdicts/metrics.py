"""The claims' metrics, per seed: from the nodes' outputs (a run) or from a table shaped as the
report's results.json, variant -> metric -> seed -> value (a published file,
report.published). The two name the same numbers: TABLE_NAMES says which column holds which.

A node's outputs are its stage's declared type (ssmax.stages.outputs: pretrain's Trained
fields, eval_loss's and eval_niah's Outputs), read by attribute: a field the stage does not
write is an AttributeError, not a silent None. Typed Any here: the stages sit a floor above.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ssmax.verdicts.results import Results

PN_R2 = "p_n log fit R²"  # results.json's column of the rationale model's log-law fit


def table_names(metric: str) -> tuple[str, ...]:
    """The results.json columns a claim metric is made of (theta_penalty: two)."""
    if metric.startswith(("loss@", "niah@")):
        kind, k = metric.split("@")
        return (f"{kind} @{k}x",)
    fixed = {"pretrain_loss": ("pretrain val loss",), "niah": ("niah past 1x",),
             "needle_top": ("needle top mean",), "pn_r2": (PN_R2,),
             "theta_penalty": ("loss @1x", "loss @1x training theta")}  # fmt: skip
    if metric not in fixed:
        raise ValueError(f"unknown claim metric {metric!r}")
    return fixed[metric]


def values_of(results: Results, metric: str, variant: str) -> dict[int, float]:
    """seed -> value of one metric for one variant. Metrics: pretrain_loss, loss@<k>,
    theta_penalty (loss at 1x with theta x50 minus with the training theta), niah (mean
    accuracy past the training length), niah@<k>, needle_top; pn_r2 from a table only."""
    if results.table is not None:
        return _from_table(results.table.get(variant, {}), table_names(metric))
    if metric == "pretrain_loss":
        runs, get = results.get("pretrain", variant), lambda o: o.val_loss
    elif metric.startswith("loss@"):
        k = metric.removeprefix("loss@")  # a multiple the eval may not have run at: None
        runs, get = results.get("eval_loss", variant), lambda o: o.loss_at.get(k)
    elif metric == "theta_penalty":
        runs = results.get("eval_loss", variant)

        def get(o: Any) -> float | None:
            base, at = o.base_theta_loss_at_1x, o.loss_at.get("1")
            return None if base is None or at is None else at - base
    elif metric == "niah":
        runs, get = results.get("eval_niah", variant), lambda o: o.mean_accuracy(beyond=1)
    elif metric.startswith("niah@"):
        k = metric.removeprefix("niah@")
        runs, get = results.get("eval_niah", variant), lambda o: o.accuracy.get(k)
    elif metric == "needle_top":
        runs = results.get("eval_niah", variant)
        get = lambda o: o.needle_scores.top_mean if o.needle_scores else None  # noqa: E731
    else:
        raise ValueError(f"unknown claim metric {metric!r}")
    return _kept(runs, get)


def _kept(runs: dict[int, Any], get: Callable[[Any], float | None]) -> dict[int, float]:
    out = {}
    for seed, outputs in runs.items():
        v = get(outputs)
        if v is not None and not math.isnan(float(v)):
            out[seed] = float(v)
    return out


def _from_table(columns: dict[str, dict[int, float]], names: tuple[str, ...]) -> dict[int, float]:
    """A metric from a variant's columns; theta_penalty: loss at 1x minus its training theta's
    (the same subtraction as from the nodes), in the seeds that have both."""
    if len(names) == 1:
        return _kept({s: {"v": v} for s, v in columns.get(names[0], {}).items()}, lambda o: o["v"])
    at, base = (columns.get(n, {}) for n in names)
    both = {s: {"v": at[s] - base[s]} for s in at if s in base}
    return _kept(both, lambda o: o["v"])


def absent_reason(results: Results, metric: str) -> str:
    """Why a table lacks a claim metric ('' where it does not say): its absent columns."""
    why = [f"{n}: {results.absent[n]}" for n in table_names(metric) if n in results.absent]
    return "; ".join(why)
