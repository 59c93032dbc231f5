"""The per-variant results table: every node's numbers, mean and spread over seeds."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

import numpy as np

from ssmax.config.variants import ordered
from ssmax.verdicts.metrics import niah_mean


def gather(inputs: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[int, float]]]:
    """variant -> metric name -> seed -> value, seeds in numeric order (results.json)."""
    table: dict[str, dict[str, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    order = {"pretrain": 0, "eval_loss": 1, "eval_niah": 2}  # the table's columns

    def rank(name: str) -> tuple[int, str, int]:
        stage, variant, seed = name.split("/")
        return order.get(stage, 3), variant, int(seed.removeprefix("seed"))

    for name in sorted(inputs, key=rank):
        out = inputs[name]
        stage, variant, seed_name = name.split("/")
        seed = int(seed_name.removeprefix("seed"))
        row = table[variant]
        if stage == "pretrain":
            if out.get("val_loss") is not None:
                row["pretrain val loss"][seed] = out["val_loss"]
        elif stage == "eval_loss":
            for k, v in by_multiple(out["loss_at"]):
                row[f"loss @{k}x"][seed] = v
            if out.get("base_theta_loss_at_1x") is not None:
                row["loss @1x training theta"][seed] = out["base_theta_loss_at_1x"]
            for k, v in by_multiple(out.get("facts_loss_at") or {}):
                row[f"facts loss @{k}x"][seed] = v
        elif stage == "eval_niah":
            for k, v in by_multiple(out["accuracy"]):
                row[f"niah @{k}x"][seed] = v
            for k, v in by_multiple(out.get("base_theta_accuracy") or {}):
                row[f"niah @{k}x training theta"][seed] = v
            if out.get("accuracy_grid"):
                row["niah mean"][seed] = float(np.mean(out["accuracy_grid"]))
            past = niah_mean(out, beyond=1)  # the retrieval claims' metric
            if past is not None:
                row["niah past 1x"][seed] = past
            needle = out.get("needle_scores") or {}
            if needle.get("top_mean") is not None:
                row["needle top mean"][seed] = needle["top_mean"]
            if out.get("copy"):
                row["copy gain"][seed] = out["copy"]["gain"]
    return {v: dict(m) for v, m in table.items()}


def by_multiple(values: dict[str, float]) -> list[tuple[str, float]]:
    """Items keyed by a length multiple, in numeric order (done.json sorts keys as text)."""
    return sorted(values.items(), key=lambda item: float(item[0]))


def fmt(by_seed: dict[int, float]) -> str:
    values = list(by_seed.values())
    if not values:
        return "-"
    mean = statistics.fmean(values)
    return f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ± {statistics.stdev(values):.3f}"


def rows(table: dict[str, dict[str, dict[int, float]]]) -> tuple[list[str], list[list[str]]]:
    """(columns, one row of formatted cells per variant, in the variants' order)."""
    variants = ordered(list(table))
    columns = list(dict.fromkeys(c for v in variants for c in table[v]))
    body = [[v, *(fmt(table[v].get(c, {})) for c in columns)] for v in variants]
    return ["variant", *columns], body
