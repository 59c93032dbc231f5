"""A run's seeds against the published verdict run (report.published), metric by metric: is
each value inside the published seeds' range, or how many of their sds from their mean; and in
one line, whether this run reproduces the published numbers within seed noise.

Within seed noise: inside the 99% prediction interval of one more seed drawn like the published
ones, mean ± t(0.995, n - 1) sd sqrt(1 + 1/n) (about ±3.7 sd for 8 seeds). Each value is
tested on its own, so about one value in a hundred falls outside by chance alone. Only a run of
the published preset is compared: another preset's numbers are another experiment.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from scipy import stats

from ssmax.config.variants import ordered
from ssmax.verdicts.published_file import PUBLISHED, ROOT, Published, letter, load
from ssmax.verdicts.results import Table

LEVEL = 0.99  # the prediction interval's coverage
COLUMNS = ["variant", "metric", "published seeds: mean ± sd [min, max]",
           "this run, per seed: value (where)"]  # fmt: skip


@dataclass
class Placed:
    variant: str
    metric: str
    published: str  # mean ± sd [min, max] (n seeds)
    seeds: dict[int, str] = field(default_factory=dict)  # seed -> "1.790 (inside)"
    off: list[int] = field(default_factory=list)  # seeds outside the prediction interval


@dataclass
class Against:
    file: str  # the published file, relative to the repository
    digest: str  # its sha256: which numbers this report compared with
    line: str  # the one-line answer
    rows: list[Placed] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    def table(self) -> list[list[str]]:
        return [[r.variant, r.metric, r.published,
                 "; ".join(f"seed {s}: {x}" for s, x in r.seeds.items())]
                for r in self.rows]  # fmt: skip


def place(value: float, published: list[float]) -> tuple[str, bool]:
    """(where value lies against the published seeds' values, within seed noise)."""
    n, mean = len(published), statistics.fmean(published)
    sd = statistics.stdev(published) if n > 1 else math.nan
    half = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1)) * sd * math.sqrt(1 + 1 / n) if n > 1 else 0
    within = abs(value - mean) <= half  # sd 0: only the published value itself
    if min(published) <= value <= max(published):
        return "inside the range", within
    z = (value - mean) / sd if sd > 0 else math.copysign(math.inf, value - mean)
    return f"{z:+.1f} sd{'' if within else ', outside'}", within


def against(table: Table, preset: str, path: Path = PUBLISHED) -> Against:
    """This run's results.json table placed against the published file's."""
    rel = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    if not path.exists():
        return Against(rel, "", f"No published values to compare with ({rel} is not here).")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    pub: Published = load(path)
    if preset != pub.run["preset"]:
        return Against(rel, digest, f"Not compared: the published run is the "
                       f"{pub.run['preset']} preset, this run the {preset} preset.")  # fmt: skip
    rows = []
    for variant in ordered([v for v in table if v in pub.table]):
        for metric, by_seed in pub.table[variant].items():
            mine = table[variant].get(metric, {})
            if not mine:
                continue
            values = list(by_seed.values())
            spread = (f"{pub.fmt(metric, statistics.fmean(values))} ± "
                      f"{statistics.stdev(values):.2g} [{pub.fmt(metric, min(values))}, "
                      f"{pub.fmt(metric, max(values))}] ({len(values)} seeds)")  # fmt: skip
            row = Placed(letter(variant), metric, spread)
            for seed, value in mine.items():
                where, within = place(value, values)
                row.seeds[seed] = f"{pub.fmt(metric, value)} ({where})"
                row.off += [] if within else [seed]
            rows.append(row)
    return Against(rel, digest, verdict_line(rows, pub), rows)


def verdict_line(rows: list[Placed], pub: Published) -> str:
    if not rows:
        return "Nothing to compare: this run has none of the published metrics."
    run = (
        f"the published run ({pub.run['date']}, seeds {pub.run['seeds'][0]}-{pub.run['seeds'][-1]})"
    )
    off = [f"{r.metric} of {r.variant} (seed {', '.join(map(str, r.off))})" for r in rows if r.off]
    if not off:
        return (f"This run reproduces {run} within seed noise: every value of the "
                f"{len(rows)} metric-variant pairs compared lies within the {LEVEL:.0%} "
                "prediction interval of one more published seed.")  # fmt: skip
    return (f"This run does not reproduce {run} within seed noise in {len(off)} of "
            f"{len(rows)} metric-variant pairs: {'; '.join(off)}.")  # fmt: skip
