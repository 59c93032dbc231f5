"""The per-variant results table: every node's numbers, mean and spread over seeds."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from ssmax.config.variants import ordered
from ssmax.report.declared import Cells
from ssmax.verdicts.results import Table


def gather(inputs: dict[str, Any], columns: dict[str, Cells]) -> Table:
    """variant -> column -> seed -> value (results.json), seeds in numeric order: each node's
    cells as its stage declares them (columns: reported name -> its cells, the names in the
    table's order; ssmax.stages.report.declared). inputs: node (as reported) -> its outputs."""
    table: Table = defaultdict(lambda: defaultdict(dict))  # type: ignore[assignment]
    order = {name: i for i, name in enumerate(columns)}

    def rank(name: str) -> tuple[int, str, int]:
        stage, variant, seed = name.split("/")
        return order.get(stage, len(order)), variant, int(seed.removeprefix("seed"))

    for name in sorted(inputs, key=rank):
        stage, variant, seed_name = name.split("/")
        row = table[variant]  # every variant with a node has a row, cells or not
        cells = columns[stage](inputs[name]) if stage in columns else {}
        for column, value in cells.items():
            if value is not None:
                row[column][int(seed_name.removeprefix("seed"))] = value
    return {v: dict(m) for v, m in table.items()}


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
