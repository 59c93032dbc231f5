"""Another run of some of the published run's chains, judged on its own paired seeds beside the
published run (issue 42 item 5: rerun agreement measured, not modelled; the registration of
2026-11-29, "A replication").

    python -m ssmax.report.published --replicate OTHER.json

OTHER.json holds the other run's per-seed values, shaped as a report's results.json (variant ->
metric -> seed -> value), at its top level or under "results". Nothing of the published run
enters its tests: the claims whose variants it has are decided by the rule on its own values
and seeds only, in their own families (their own m and corrections, said in the output). The
output shows first, for every ordering between its variants, the mean difference high - low
with its 95% t-interval and seeds in both runs side by side and whether the two intervals
overlap; then each judged ordering's verdict in both runs (the published one as published, in
the published families), each ordering once. The count of orderings whose verdict came again
counts only those decidable in both runs (neither n/a nor not decidable at n seeds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ssmax.config.variants import facts, names
from ssmax.verdicts.claims import Checked, Claim, apply_rule, claims, paper_claims
from ssmax.verdicts.multiplicity import CORRECTION_NAMES, CORRECTIONS, UNDECIDABLE
from ssmax.verdicts.results import Results, Settings, Table
from ssmax.verdicts.stats import Interval
from ssmax.verdicts.text import md_table

UNDECIDED = ("n/a", UNDECIDABLE)  # not counted in "came again"


@dataclass(frozen=True)
class Effect:
    """One ordering's mean difference in both runs."""

    ordering: str
    published: Interval
    other: Interval

    @property
    def overlap(self) -> bool | None:
        """Whether the two 95% t-intervals overlap (None: either has < 2 seeds)."""
        p, o = self.published, self.other
        if p.n < 2 or o.n < 2:
            return None
        return p.lo <= o.hi and o.lo <= p.hi

    @property
    def same_uncorrected(self) -> bool | None:
        """Whether the uncorrected verdict (95% t-interval) came again (None: a run has no
        value)."""
        if not self.published.n or not self.other.n:
            return None
        return self.published.verdict() == self.other.verdict()


@dataclass(frozen=True)
class Again:
    """One ordering in both runs, each judged in its own families."""

    claim: str  # the claim's key (the first claim stating it)
    ordering: str
    published: Checked
    other: Checked

    @property
    def decidable(self) -> bool:
        return self.published.verdict not in UNDECIDED and self.other.verdict not in UNDECIDED

    @property
    def same(self) -> bool:
        return self.published.verdict == self.other.verdict

    @property
    def same_uncorrected(self) -> bool:
        return self.published.uncorrected == self.other.uncorrected


@dataclass
class Replication:
    """The other run judged on its own pairs, beside the published run."""

    seeds: list[int]
    own: list[Claim]  # the claims whose variants it has, judged on its values alone
    effects: list[Effect]
    again: list[Again]
    left_out: list[str]  # orderings a run has no paired value of


BAD_SHAPE = ("not a results.json: it must map variant -> metric -> seed -> number, at its top "
             "level or under \"results\"")  # fmt: skip


def as_table(data: object, path: Path | str = "the file") -> Table:
    """results.json's content (seeds as text) as a Table; one line naming the file where it is
    not that shape."""
    if not isinstance(data, dict) or not data:
        raise SystemExit(f"{path}: {BAD_SHAPE}")
    out: Table = {}
    for v, ms in data.items():
        if not isinstance(ms, dict):
            raise SystemExit(f"{path}: {BAD_SHAPE} ({v!r} holds no metrics)")
        for m, by_seed in ms.items():
            if not isinstance(by_seed, dict):
                raise SystemExit(f"{path}: {BAD_SHAPE} ({v!r} / {m!r} holds no seeds)")
            try:
                out.setdefault(v, {})[m] = {int(s): _number(x) for s, x in by_seed.items()}
            except (TypeError, ValueError):
                raise SystemExit(
                    f"{path}: {BAD_SHAPE} ({v!r} / {m!r}: a seed that is not "
                    "an integer or a value that is not a number)"
                ) from None
    return out


def _number(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(x)
    return float(x)


def read_json(path: Path) -> dict:
    """A JSON object from a file; one line naming the file where it is missing, empty, not
    JSON or not an object."""
    path = Path(path)
    if path.is_dir():
        raise SystemExit(f"{path}: a folder; allowed: a results.json file")
    if not path.is_file():
        raise SystemExit(f"{path}: no such file")
    text = path.read_text(errors="replace")
    if not text.strip():
        raise SystemExit(f"{path}: empty")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(data, dict):
        raise SystemExit(f"{path}: {BAD_SHAPE}")
    return data


def judgeable(table: Table, path: Path | str) -> Table:
    """The table, if some metric has 2 or more paired seeds in two variants (an ordering to
    test) or p_n's fit has 2 seeds; else one line: too few seeds or metrics to judge."""
    pairs = [set(a[m]) & set(b[m]) for x, a in table.items() for y, b in table.items() if x < y
             for m in set(a) & set(b)]  # fmt: skip
    pn = [len(ms.get("p_n log fit R²", {})) for ms in table.values()]
    if max(map(len, pairs), default=0) < 2 and max(pn, default=0) < 2:
        seeds = sorted({s for ms in table.values() for by in ms.values() for s in by})
        metrics = sorted({m for ms in table.values() for m in ms})
        raise SystemExit(f"{path}: too few seeds or metrics to judge: no metric with 2 or more "
                         f"seeds in two variants (variants {sorted(table)}, metrics {metrics}, "
                         f"seeds {seeds})")  # fmt: skip
    return table


def read_table(path: Path) -> Table:
    """A results.json-shaped file (or one holding it under "results") as a Table, checked for
    shape (one line naming the file where it fails)."""
    data = read_json(path)
    return as_table(data.get("results", data), path)


def read_judgeable(path: Path) -> Table:
    """read_table, and something to judge in it (a run's file that the verdicts read: one
    seed's file of the registered run is read by read_table alone)."""
    return judgeable(read_table(path), path)


def own_results(pub: Results, other: Table) -> Results:
    """The other run as the claims read it: its values and seeds only (the published run's
    preset and training length, as it reran the same chains)."""
    known = set(names())
    for variant in other:
        if variant not in known or (pub.table is not None and variant not in pub.table):
            raise SystemExit(f"{variant} is not in the published file; it has "
                             f"{sorted(pub.table or {})}")  # fmt: skip
    seeds = sorted({s for ms in other.values() for by in ms.values() for s in by})
    settings = Settings(pub.settings.preset, seeds, pub.settings.train_len)
    return Results(settings, {}, table=other)


def judged(res: Results, variants: set[str]) -> list[Claim]:
    """The claims whose variants the run has, judged on its values alone: their own families."""
    letters = {facts(v).letter for v in variants}
    return apply_rule([c for c in paper_claims(res) if set(c.letters) <= letters])


def _letters(ordering: str) -> set[str]:
    return set(ordering.split(" on ")[0].split(" < "))


def _differences(res: Results) -> dict[str, dict[int, float]]:
    """Every ordering of the paper's claims, each once: its paired differences in the run."""
    out: dict[str, dict[int, float]] = {}
    for c in paper_claims(res):
        for k in c.checks:
            out.setdefault(k.ordering, k.differences)
    return out


def compare(pub: Results, other: Table) -> Replication:
    """The other run on its own pairs beside the published run (module docstring)."""
    res = own_results(pub, other)
    letters = {facts(v).letter for v in other}
    own = judged(res, set(other))
    published = {c.key: c for c in claims(pub)}
    theirs = _differences(res)
    effects = [Effect(k, Interval.of(list(d.values())),
                      Interval.of(list(theirs.get(k, {}).values())))
               for k, d in _differences(pub).items() if _letters(k) <= letters]  # fmt: skip
    again: dict[str, Again] = {}
    for c in own:
        for k in c.checks:
            if k.ordering not in again:  # each ordering once: its first claim's family
                mine = next(j for j in published[c.key].checks if j.ordering == k.ordering)
                again[k.ordering] = Again(c.key, k.ordering, mine, k)
    left_out = [e.ordering for e in effects if not e.published.n or not e.other.n]
    return Replication(res.settings.seeds, own, effects, list(again.values()), left_out)


def _families(own: list[Claim]) -> str:
    fams = {c.family: c for c in own}
    if not fams:
        return "none: it has no claim's variants"
    return "; ".join(f"{f} ({CORRECTION_NAMES[CORRECTIONS[f]]}, m = {c.m}; permutation floor "
                     f"{c.floor} seeds): {', '.join(x.key for x in own if x.family == f)}"
                     for f, c in fams.items())  # fmt: skip


def _overlap(e: Effect) -> str:
    return "-" if e.overlap is None else ("yes" if e.overlap else "**no**")


def _again(flag: bool, decidable: bool = True) -> str:
    return "-" if not decidable else ("yes" if flag else "**no**")


def table(rep: Replication) -> str:
    """The replication as markdown: its families, the effects side by side, the verdicts."""
    s = rep.seeds
    seeds = f"{s[0]}-{s[-1]}" if s == list(range(s[0], s[-1] + 1)) else ", ".join(map(str, s))
    head = (f"Judged on its own paired seeds ({seeds}: {len(s)}) only, none of the published "
            f"run's values in its tests; its own families, m and corrections: "
            f"{_families(rep.own)}.")  # fmt: skip
    overlapping = [e for e in rep.effects if e.overlap is not None]
    effects = [[e.ordering, str(e.published), str(e.other), _overlap(e)] for e in rep.effects]
    decidable = [x for x in rep.again if x.decidable]
    both = [x for x in rep.again if "n/a" not in (x.published.uncorrected, x.other.uncorrected)]
    valued = [e for e in rep.effects if e.same_uncorrected is not None]
    verdicts = (f"Verdicts: {sum(x.same for x in decidable)} of {len(decidable)} orderings "
                f"decidable in both runs came again under the rule (each ordering once; of "
                f"{len(rep.again)} judged, the others are n/a or not decidable in a run); "
                f"uncorrected (95% t-interval), {sum(bool(e.same_uncorrected) for e in valued)} "
                f"of the {len(valued)} orderings above with values in both runs.")  # fmt: skip
    rows = [[x.claim, x.ordering, x.published.shown, x.other.shown,
             _again(x.same, x.decidable), x.published.uncorrected, x.other.uncorrected,
             _again(x.same_uncorrected, x in both)] for x in rep.again]  # fmt: skip
    columns = ["claim", "ordering", "published", "other run", "again", "published (uncorr.)",
               "other (uncorr.)", "again (uncorr.)"]  # fmt: skip
    out = [head, "",
           f"Effects, high - low: mean [95% t-interval] (seeds); the intervals overlap in "
           f"{sum(bool(e.overlap) for e in overlapping)} of {len(overlapping)}:", "",
           *md_table(["ordering", "published", "other run", "intervals overlap"], effects), "",
           verdicts, "", *md_table(columns, rows)]  # fmt: skip
    if rep.left_out:
        out += ["", f"Left out (a value missing in a run): {'; '.join(rep.left_out)}."]
    return "\n".join(out)
