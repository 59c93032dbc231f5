"""Another run of some of the published run's chains, judged against it ordering by ordering
(issue 42 item 5: rerun agreement measured, not modelled).

    python -m ssmax.report.published --replicate OTHER.json

OTHER.json holds the other run's per-seed values, shaped as a report's results.json (variant ->
metric -> seed -> value), at its top level or under "results". Its variants' values replace
the published ones; every claim is decided again by the rule of issue 42 with the same families
(the other variants' published values stay, so m and the corrections are the published run's);
then each ordering between replaced variants, on seeds both runs have, says whether its verdict
came again, under the rule and uncorrected. An ordering whose metric the other run lacks, or
the published file lacks, is left out and named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from ssmax.config.variants import facts
from ssmax.report.claims import Checked, claims
from ssmax.report.gather import Results, Table
from ssmax.report.render import _md_table


@dataclass(frozen=True)
class Again:
    """One ordering in both runs."""

    claim: str  # the claim's key
    ordering: str
    published: Checked
    other: Checked

    @property
    def same(self) -> bool:
        return self.published.verdict == self.other.verdict

    @property
    def same_uncorrected(self) -> bool:
        return self.published.uncorrected == self.other.uncorrected


def as_table(data: dict) -> Table:
    """results.json's content (seeds as text) as a Table."""
    return {v: {m: {int(s): float(x) for s, x in by_seed.items()} for m, by_seed in ms.items()}
            for v, ms in data.items()}  # fmt: skip


def read_table(path: Path) -> Table:
    """A results.json-shaped file (or one holding it under "results") as a Table."""
    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"no such file: {path}")
    data = json.loads(path.read_text())
    return as_table(data.get("results", data))


def replaced(pub: Results, other: Table) -> Results:
    """The published run with the other run's variants in place of its own, on the seeds both
    have (a seed only one run has is not compared)."""
    assert pub.table is not None, "a published file's Results (a table, no nodes)"
    seeds = set(pub.settings.seeds)
    table = {v: dict(ms) for v, ms in pub.table.items()}
    for variant, metrics in other.items():
        if variant not in table:
            raise SystemExit(f"{variant} is not in the published file; it has {sorted(table)}")
        table[variant] = {m: {s: x for s, x in by_seed.items() if s in seeds}
                          for m, by_seed in metrics.items()}  # fmt: skip
    return replace(pub, table=table)


def compare(pub: Results, other: Table) -> tuple[list[Again], list[str]]:
    """Each ordering between the other run's variants: its verdict in both (same families and
    m); and the orderings left out, with why."""
    theirs = claims(replaced(pub, other))
    mine = claims(pub)
    letters = {facts(v).letter for v in other}
    again, left_out = [], []
    for a, b in zip(mine, theirs, strict=True):
        if not set(a.letters) & letters:
            continue
        for p, o in zip(a.checks, b.checks, strict=True):
            low_high = p.ordering.split(" on ")[0].split(" < ")
            if not set(low_high) <= letters:
                continue  # compares a variant the other run did not train
            if "n/a" in (p.verdict, o.verdict):
                left_out.append(f"{a.key}: {p.ordering}")
                continue
            again.append(Again(a.key, p.ordering, p, o))
    return again, list(dict.fromkeys(left_out))


def table(again: list[Again]) -> str:
    """The orderings as a markdown table, with the count that came again."""
    rows = [[x.claim, x.ordering, x.published.verdict, x.other.verdict,
             "yes" if x.same else "**no**", x.published.uncorrected, x.other.uncorrected,
             "yes" if x.same_uncorrected else "**no**", x.other.difference]
            for x in again]  # fmt: skip
    head = (f"{sum(x.same for x in again)} of {len(again)} orderings' verdicts came again under "
            f"the rule of issue 42; {sum(x.same_uncorrected for x in again)} of {len(again)} "
            f"uncorrected.")  # fmt: skip
    columns = ["claim", "ordering", "published", "other run", "again", "published (uncorr.)",
               "other (uncorr.)", "again (uncorr.)", "other run: difference"]  # fmt: skip
    return "\n".join([head, "", *_md_table(columns, rows)])
