"""What sized the confirmatory run: for each primary ordering, its effect and spread on the
exploratory seeds of each published run (docs/results/), the paired seeds with which the
two-sided paired t-test at Holm's strictest level 0.05 / m reaches power 0.8 there, and the
power at each registered run's seed count. The registration's "power" rows are this table, computed
before any registered seed ran; tests/test_registration.py recomputes them.

    python -m ssmax.registration.power   # the table, as the registration holds it
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ssmax.config.variants import by_letter
from ssmax.verdicts.claims import Ordering
from ssmax.verdicts.metrics import table_names
from ssmax.verdicts.registered import ROOT, Registration, cli, load
from ssmax.verdicts.replicate import as_table
from ssmax.verdicts.stats import ALPHA, Interval, paired_t_power, seeds_for_power

RESULTS = ROOT / "docs" / "results"
# the exploratory runs: name -> the files whose seeds together make it
SOURCES = {
    "cpu_xeon_seeds3-12": ("verdict_seeds3-10.json", "verdict_seeds11-12.json"),
    "cpu_epyc_rerun_seeds3-10": ("cpu_rerun_2026-11-27.json",),
    "h100_seeds3-10": ("gpu_replication_2026-11-27.json",),
}


def parse(label: str) -> Ordering:
    """'a < b on niah' -> Ordering('niah', 'a', 'b')."""
    low_high, metric = label.split(" on ")
    low, high = (x.strip() for x in low_high.split("<"))
    return Ordering(metric, low, high)


def exploratory(files: tuple[str, ...]) -> dict[str, dict[str, dict[int, float]]]:
    """variant -> results.json column -> seed -> value, the files' seeds together."""
    table: dict[str, dict[str, dict[int, float]]] = {}
    for name in files:
        for v, ms in as_table(json.loads((RESULTS / name).read_text())["results"]).items():
            for m, by_seed in ms.items():
                table.setdefault(v, {}).setdefault(m, {}).update(by_seed)
    return table


def differences(table: dict, o: Ordering) -> list[float]:
    (column,) = table_names(o.metric)
    low = table.get(by_letter()[o.low], {}).get(column, {})
    high = table.get(by_letter()[o.high], {}).get(column, {})
    return [high[s] - low[s] for s in sorted(set(low) & set(high))]


def rows(reg: Registration) -> list[dict]:
    """One row per primary ordering and exploratory run with 2 or more paired seeds."""
    level = ALPHA / len(reg.primary)
    counts = {run: len(reg.seeds_of(run)) for run in reg.runs}
    tables = {name: exploratory(files) for name, files in SOURCES.items()}
    out = []
    for label in reg.primary:
        for source, table in tables.items():
            d = differences(table, parse(label))
            if len(d) < 2:
                continue
            iv = Interval.of(d)
            needed = seeds_for_power(iv.mean, iv.sd, alpha=level)
            out.append({
                "ordering": label, "source": source, "seeds": iv.n,
                "mean": round(iv.mean, 4), "sd": round(iv.sd, 4),
                "seeds_for_power_0.8": None if math.isinf(needed) else needed,
                "power": {run: round(paired_t_power(iv.mean, iv.sd, n, level), 3)
                          for run, n in counts.items()},
            })  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    reg = load(Path(argv[0])) if argv else load()
    json.dump(rows(reg), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(cli(main))
