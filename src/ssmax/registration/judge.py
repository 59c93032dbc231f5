"""A registered run judged against its registration: docs/confirmatory.md, generated.

    python -m ssmax.registration.judge           # rewrite docs/confirmatory.md from the records
    python -m ssmax.registration.judge --check   # exit 1 where the page and the records disagree

The page says how far the run is (seeds recorded, failed, to go), every seed's values and
whether each seed's variants formed the skill at the training length (the registration's
validity criterion). Only once every planned seed is recorded does it compute the verdicts,
by the claims' rule (report.claims), and call them confirmatory only where the run matches
its registration (conformity: seeds, variants, preset, every node's commit, the registration
unchanged since it was committed); otherwise it names what differs and calls them
exploratory. Before that it computes no verdict, p-value or interval (the registration's
conduct: no interim look).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ssmax.config.variants import ordered
from ssmax.files.atomic import atomic_write_text
from ssmax.registration.run import planned
from ssmax.registration.spec import REGISTRATION, ROOT, Registration, load
from ssmax.report.claims import Claim, claims
from ssmax.report.gather import Results, Settings, Table
from ssmax.report.published_file import counts, letter
from ssmax.report.render import _md_table, family_text, ordering_text

PAGE = ROOT / "docs" / "confirmatory.md"
# the registration's validity criterion (its "validity"): NIAH accuracy at 1x >= 0.5
SKILL, SKILL_AT_LEAST = "niah @1x", 0.5
SHOWN = ("pretrain val loss", "loss @5x", "loss @10x", "loss @20x", "niah @1x", "niah past 1x",
         "needle top mean", "p_n log fit R²")  # fmt: skip


@dataclass
class Run:
    """One registered run's records as they stand."""

    reg: Registration
    name: str
    planned: list[int]
    records: dict[int, dict] = field(default_factory=dict)  # seed -> its record
    failed: dict[int, dict] = field(default_factory=dict)  # seed -> its failure record

    @property
    def complete(self) -> bool:
        return all(s in self.records for s in self.planned)

    def table(self) -> Table:
        """variant -> metric -> seed -> value, every recorded seed."""
        out: Table = {}
        for seed, rec in sorted(self.records.items()):
            for v, ms in rec["results"].items():
                for m, by_seed in ms.items():
                    out.setdefault(v, {}).setdefault(m, {})[seed] = float(by_seed[str(seed)])
        return out


def gather(reg: Registration, run: str) -> Run:
    out = Run(reg, run, planned(reg, run))
    for path in sorted(reg.records(run).glob("seed*.json")):
        rec = json.loads(path.read_text())
        (out.failed if path.name.endswith(".failed.json") else out.records)[rec["seed"]] = rec
    return out


def first_committed(path: Path) -> str | None:
    """The file's content at the commit that added it (None: not committed, or no git)."""
    try:
        rel = str(path.resolve().relative_to(ROOT))
        added = subprocess.run(["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%H",
                                "--", rel], capture_output=True, text=True, check=True)  # fmt: skip
        first = added.stdout.split()[-1]
        return subprocess.run(["git", "-C", str(ROOT), "show", f"{first}:{rel}"],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    except (subprocess.CalledProcessError, IndexError, FileNotFoundError, ValueError):
        return None


def conformity(run: Run) -> list[str]:
    """What differs between the run and its registration (empty: it matches)."""
    reg, out = run.reg, []
    if set(run.records) != set(run.planned):
        extra, missing = set(run.records) - set(run.planned), set(run.planned) - set(run.records)
        out += [f"seeds not registered: {sorted(extra)}"] if extra else []
        out += [f"registered seeds without a record: {sorted(missing)}"] if missing else []
    for seed, rec in sorted(run.records.items()):
        if set(rec["results"]) != set(reg.variants):
            out.append(f"seed {seed}: variants {sorted(rec['results'])}, not the registered ones")
        if rec["run"]["preset"] != reg.preset:
            out.append(f"seed {seed}: preset {rec['run']['preset']}, not {reg.preset}")
        commits = {n["git_commit"] for n in rec["nodes"].values()}
        if run.name == "cpu" and commits != {reg.code_commit}:
            out.append(f"seed {seed}: nodes ran {sorted(commits)}, not {reg.code_commit[:7]}")
    if first_committed(reg.path) != reg.path.read_text():
        out.append(f"{reg.path.name} differs from the version first committed")
    return out


def valid(table: Table, seed: int, variant: str) -> bool | None:
    """Whether the variant formed the skill at the training length in this seed (None: the
    variant has no NIAH, as p_n's model)."""
    value = table.get(variant, {}).get(SKILL, {}).get(seed)
    return None if value is None else value >= SKILL_AT_LEAST


def seed_rows(run: Run) -> list[list[str]]:
    table, seeds = run.table(), sorted(run.records)
    return [[letter(v), m, *(f"{table[v][m][s]:.3f}" if s in table[v].get(m, {}) else "-"
                             for s in seeds)]
            for m in SHOWN for v in ordered(list(table)) if m in table[v]]  # fmt: skip


def validity_rows(run: Run) -> list[list[str]]:
    table, rows = run.table(), []
    for v in ordered(list(table)):
        marks = [valid(table, s, v) for s in sorted(run.records)]
        if any(m is not None for m in marks):
            rows.append([letter(v), *("yes" if m else "**no**" for m in marks)])
    return rows


def invalid_seeds(run: Run) -> list[int]:
    table = run.table()
    return sorted({s for s in run.records for v in table if valid(table, s, v) is False})


def judged(run: Run, leave_out: tuple[int, ...] = ()) -> list[Claim]:
    table = {v: {m: {s: x for s, x in by.items() if s not in leave_out} for m, by in ms.items()}
             for v, ms in run.table().items()}  # fmt: skip
    seeds = sorted(set(run.records) - set(leave_out))
    train_len = run.records[seeds[0]]["run"]["train_len"]
    return claims(Results(Settings(run.reg.preset, seeds, train_len), {}, table=table))


def verdict_section(run: Run) -> list[str]:
    differs = conformity(run)
    kind = "exploratory (it does not match its registration)" if differs else "confirmatory"
    checked = judged(run)
    out = [f"**Verdicts ({kind}): {counts([c.verdict for c in checked])}** (of {len(checked)}), "
           f"computed by the rule the registration states."]  # fmt: skip
    out += [f"- differs from the registration: {d}" for d in differs]
    bad = invalid_seeds(run)
    if bad:
        without = judged(run, tuple(bad))
        out.append(f"Without the seeds where a variant did not form the skill ({bad}), as "
                   f"information only: {counts([c.verdict for c in without])}.")  # fmt: skip
    rows = [[c.text, family_text(c), f"**{c.verdict}**",
             " · ".join(ordering_text(k) for k in c.checks) or c.value]
            for c in checked]  # fmt: skip
    return [*out, "", *_md_table(["claim (paper)", "family", "verdict", "orderings"], rows)]


def page(reg: Registration) -> str:
    out = [f"# The confirmatory run: {reg.name}", "",
           "Generated from the seed records in docs/results/"
           f"{reg.name}/ by `python -m ssmax.registration.judge` (`make confirm-page`); the "
           f"registration: [registration/{reg.name}.md](registration/{reg.name}.md)."]  # fmt: skip
    for name in reg.runs:
        run = gather(reg, name)
        done = sorted(run.records)
        out += ["", f"## Run `{name}`", "",
                f"{len(done)} of {len(run.planned)} planned seeds recorded "
                f"({', '.join(map(str, done)) or 'none yet'}); failed twice and replaced: "
                f"{', '.join(map(str, sorted(run.failed))) or 'none'}."]  # fmt: skip
        if not done:
            continue
        machines = sorted({rec["run"]["cpu"] for rec in run.records.values()})
        minutes = statistics.fmean(rec["wall_s"] for rec in run.records.values()) / 60
        out.append(f"Machines: {', '.join(machines)}; {minutes:.1f} min a seed on average.")
        if run.complete:
            out += ["", *verdict_section(run)]
        else:
            out += ["", "Interim: no verdict, p-value or interval is computed before every "
                    "planned seed is in (the registration's conduct)."]  # fmt: skip
        seeds = [f"seed {s}" for s in done]
        out += ["", f"Skill formed at the training length ({SKILL} >= {SKILL_AT_LEAST}):", "",
                *_md_table(["variant", *seeds], validity_rows(run)), "",
                "Every seed's values:", "",
                *_md_table(["variant", "metric", *seeds], seed_rows(run))]  # fmt: skip
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ssmax.registration.judge",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    parser.add_argument("--registration", type=Path, default=REGISTRATION)
    args = parser.parse_args(argv)
    reg = load(args.registration)
    text = page(reg)
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python -m ssmax.registration.judge")
            return 1
        print(f"{PAGE.relative_to(ROOT)} is up to date")
        return 0
    atomic_write_text(PAGE, text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
