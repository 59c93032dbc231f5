"""A registered run judged against its registration: docs/confirmatory.md (docs/arms.md, ...),
generated.

    python -m ssmax.registration.judge           # rewrite docs/confirmatory.md from the records
    python -m ssmax.registration.judge --check   # exit 1 where the page and the records disagree
    python -m ssmax.registration.judge --registration docs/registration/arms-2026-11-29.json

The page (Registration.page: docs/<name less its date>.md) says how far the run is (seeds
recorded, failed, to go), every seed's values and whether each seed's variants formed the
skill at the training length (the registration's validity criterion); where the registration
has design seeds, their values and its design criterion per law first (reported, deciding
nothing). Only once every planned seed is recorded does it compute the verdicts of the
registered families, by the claims' rule (registration.families: the paper's, or the rivals'
and the leaderboard), and call them confirmatory only where the run matches its registration
(conformity: seeds, variants, preset, every node's commit, the registration unchanged since it
was committed, the code's families the registered ones); otherwise it names what differs and
calls them exploratory. Before that it computes no verdict, p-value or interval (the
registration's conduct: no interim look).

The README (and docs/results.md) hold the run's lines between `<!-- registered:NAME ... -->` and
`<!-- /registered:NAME -->` (readme_lines): how far it is, then one line a claim of its first
family with effect, interval, seeds, machines and kind; the command writes and checks them too.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

from ssmax.config.variants import facts, ordered
from ssmax.files.atomic import atomic_write_text
from ssmax.host.cli import Parser
from ssmax.registration import families
from ssmax.registration.equivalence import accepted, code_rule
from ssmax.verdicts.claims import Claim
from ssmax.verdicts.published_file import counts, letter
from ssmax.verdicts.registered import (
    DESIGN,
    REGISTRATION,
    ROOT,
    Registration,
    Run,
    cli,
    gather,
    load,
    shown,
)
from ssmax.verdicts.results import Results, Settings, Table
from ssmax.verdicts.text import family_text, md_table, ordering_text

# the registration's validity criterion (its "validity"): NIAH accuracy at 1x >= 0.5; the arms'
# design criterion, the mean of its design seeds, has the same bound (preset.design.falls_below)
SKILL, SKILL_AT_LEAST = "niah @1x", 0.5
SHOWN = ("pretrain val loss", "loss @5x", "loss @10x", "loss @20x", "niah @1x", "niah past 1x",
         "needle top mean", "p_n log fit R²")  # fmt: skip


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
    ran = {str(rec.get("commit")) for rec in run.records.values()} if run.name != "cpu" else set()
    meets = {commit: accepted(reg, commit) for commit in ran}  # git per commit, not per seed
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
        elif run.name != "cpu" and not meets[str(rec.get("commit"))]:
            out.append(f"seed {seed}: ran {str(rec.get('commit'))[:7]}, whose code is neither "
                       f"{reg.code_commit[:7]}'s nor shown to compute what it does "
                       "(python -m ssmax.registration.equivalence)")  # fmt: skip
    if first_committed(reg.path) != reg.path.read_text():
        out.append(f"{reg.path.name} differs from the version first committed")
    return out


def mismatches(run: Run, checked: list[Claim]) -> list[str]:
    """What keeps the judged run from being confirmatory: conformity, and each family the code
    forms otherwise than registered (empty: it matches)."""
    return conformity(run) + families.differs(run.reg, checked)


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


def results_of(run: Run, leave_out: tuple[int, ...] = ()) -> Results:
    table = {v: {m: {s: x for s, x in by.items() if s not in leave_out} for m, by in ms.items()}
             for v, ms in run.table().items()}  # fmt: skip
    seeds = sorted(set(run.records) - set(leave_out))
    train_len = run.records[seeds[0]]["run"]["train_len"]
    return Results(Settings(run.reg.preset, seeds, train_len), {}, table=table)


def judged(run: Run, leave_out: tuple[int, ...] = ()) -> list[Claim]:
    """The registered families' claims over the run's seeds but leave_out, by the rule; with
    seeds left out, shown as counts only: without leave-one-out (a judgement a seed)."""
    return families.judge(run.reg, results_of(run, leave_out), flips=not leave_out)


def told(reg: Registration, checked: list[Claim]) -> str:
    """The verdicts in a line: the paper's as counts of its claims, the others per family."""
    if families.is_paper(reg):
        return counts([c.verdict for c in checked])
    return families.summary(checked)


def verdict_section(run: Run) -> list[str]:
    checked = judged(run)
    differs = mismatches(run, checked)
    kind = "exploratory (it does not match its registration)" if differs else "confirmatory"
    paper = families.is_paper(run.reg)
    of = f" (of {len(checked)})" if paper else ""
    out = [f"**Verdicts ({kind}): {told(run.reg, checked)}**{of}, "
           f"computed by the rule the registration states."]  # fmt: skip
    out += [f"- differs from the registration: {d}" for d in differs]
    bad = invalid_seeds(run)
    if bad:
        without = judged(run, tuple(bad))
        out.append(f"Without the seeds where a variant did not form the skill ({bad}), as "
                   f"information only: {told(run.reg, without)}.")  # fmt: skip
    if not paper:
        return [*out, *families.tables(run.reg, checked, results_of(run))]
    rows = [[c.text, family_text(c), f"**{c.verdict}**",
             " · ".join(ordering_text(k) for k in c.checks) or c.value]
            for c in checked]  # fmt: skip
    return [*out, "", *md_table(["claim (paper)", "family", "verdict", "orderings"], rows)]


def machines(run: Run) -> str:
    names = sorted({rec["run"]["cpu"] for rec in run.records.values()})
    minutes = statistics.fmean(rec["wall_s"] for rec in run.records.values()) / 60
    node_h = (
        sum(n.get("wall_s") or 0 for rec in run.records.values() for n in rec["nodes"].values())
        / 3600
    )
    return (
        f"Machines: {', '.join(names)}; a seed's pipeline {minutes:.1f} min on average (its "
        "last try: a seed resumed from its cache counts from the resume); its nodes' own "
        f"times, summed over nodes run side by side, {node_h:.1f} h in all."
    )


def trained_elsewhere(run: Run) -> list[str]:
    """The letters of the run's variants that train nothing of their own (their sft node is
    another variant's: facts.inherit)."""
    return [letter(v) for v in ordered(list(run.table())) if "sft" in facts(v).inherit]


def design_section(reg: Registration) -> list[str]:
    """The design seeds: how far, each seed's values and NIAH at 1x, and once every design seed
    is in, the design criterion per law (its mean >= SKILL_AT_LEAST): reported, deciding
    nothing."""
    run = gather(reg, DESIGN)
    done, table = sorted(run.records), run.table()
    out = ["", "## Design seeds", "",
           f"{len(done)} of {len(run.planned)} design seeds recorded "
           f"({', '.join(map(str, done)) or 'none yet'}); failed twice: "
           f"{', '.join(map(str, sorted(run.failed))) or 'none'}. They run first, at the "
           f"registered commit; the design criterion, every law retrieves at the training length "
           f"(mean {SKILL} over the design seeds >= {SKILL_AT_LEAST}), is reported per law and "
           "decides nothing: no law's settings change whatever it shows."]  # fmt: skip
    if not done:
        return out
    commits = sorted({n["git_commit"] for r in run.records.values() for n in r["nodes"].values()})
    ran = "the registered commit" if commits == [reg.code_commit] else (
        f"{', '.join(c[:7] for c in commits)}, not {reg.code_commit[:7]}")  # fmt: skip
    out += [machines(run), f"Every node ran {ran}."]
    rows = []
    for v in ordered(list(table)):
        by = table[v].get(SKILL, {})
        if not by:
            continue
        mean = statistics.fmean(by.values()) if run.complete else None
        crit = "-" if mean is None else ("yes" if mean >= SKILL_AT_LEAST else "**no**")
        rows.append([letter(v), *(f"{by[s]:.3f}" if s in by else "-" for s in done),
                     "-" if mean is None else f"{mean:.3f}", crit])  # fmt: skip
    seeds = [f"seed {s}" for s in done]
    return [*out, "", *md_table(["variant", *seeds, "mean", "retrieves at N"], rows), "",
            "Every design seed's values:", "",
            *md_table(["variant", "metric", *seeds], seed_rows(run))]  # fmt: skip


def given(reg: Registration, how: str = " --registration ") -> str:
    """How a command names the registration: nothing for the default one."""
    return "" if reg.path.resolve() == REGISTRATION.resolve() else f"{how}{shown(reg.path)}"


def page(reg: Registration) -> str:
    out = [f"# The {reg.page.stem} run: {reg.name}", "",
           "Generated from the seed records in docs/results/"
           f"{reg.name}/ by `python -m ssmax.registration.judge{given(reg)}` (`make confirm-page"
           f"{given(reg, ' REGISTRATION=')}`); the registration: [registration/{reg.name}.md]"
           f"(registration/{reg.name}.md)."]  # fmt: skip
    if reg.design_seeds:
        out += design_section(reg)
    for name in reg.runs:
        run = gather(reg, name)
        done = sorted(run.records)
        out += ["", f"## Run `{name}`", "",
                f"{len(done)} of {len(run.planned)} planned seeds recorded "
                f"({', '.join(map(str, done)) or 'none yet'}); failed twice and replaced: "
                f"{', '.join(map(str, sorted(run.failed))) or 'none'}."]  # fmt: skip
        out += [] if name == "cpu" else ["", code_rule(reg, given(reg))]
        if not done:
            continue
        out.append(machines(run))
        if run.complete:
            out += ["", *verdict_section(run)]
        else:
            out += ["", "Interim: no verdict, p-value or interval is computed before every "
                    "planned seed is in (the registration's conduct)."]  # fmt: skip
        seeds = [f"seed {s}" for s in done]
        if elsewhere := trained_elsewhere(run):
            out += ["", f"{', '.join(elsewhere)} train nothing of their own: their rows are "
                    "their law evaluated on the weights they start from, checked per seed and "
                    "variant as the registration words validity."]  # fmt: skip
        out += ["", f"Skill formed at the training length ({SKILL} >= {SKILL_AT_LEAST}):", "",
                *md_table(["variant", *seeds], validity_rows(run)), "",
                "Every seed's values:", "",
                *md_table(["variant", "metric", *seeds], seed_rows(run))]  # fmt: skip
    return "\n".join(out) + "\n"


# the pages that show a registration's lines where they hold its markers
README = ROOT / "README.md"
LINES_IN = (README, ROOT / "docs/results.md")


def span(seeds: list[int]) -> str:
    """'13-36' for a run of consecutive seeds, else each."""
    whole = seeds == list(range(seeds[0], seeds[-1] + 1))
    return f"{seeds[0]}-{seeds[-1]}" if whole and len(seeds) > 1 else ", ".join(map(str, seeds))


def by_family(reg: Registration, checked: list[Claim]) -> str:
    """'the primary family **2 hold, ...** (of 5); the other families: ...'."""
    first = families.names(reg)[0]
    firsts = [c for c in checked if c.family == first]
    rest = [c for c in checked if c.family != first]
    others = f"; the other families: {told(reg, rest)}" if rest else ""
    return (
        f"the {first} family **{counts([c.verdict for c in firsts])}** (of {len(firsts)}){others}"
    )


def readme_lines(reg: Registration) -> str:
    """The README's lines of the registered runs: how far each is until it is complete; then
    its seeds, machines and kind with the verdicts as counts, and each claim of its first
    family (the paper's primary) with its verdict and every ordering's effect, 95% t-interval
    and verdict."""
    out = []
    if reg.design_seeds:
        design = gather(reg, DESIGN)
        page = shown(reg.page)
        out.append(f"- Design seeds: {len(design.records)} of {len(design.planned)} recorded "
                   f"(they run first and decide nothing; {page} shows them).")  # fmt: skip
    for name in reg.runs:
        run = gather(reg, name)
        done = sorted(run.records)
        if not run.complete:
            got = f" ({span(done)})" if done else ""
            out.append(f"- Run `{name}`: {len(done)} of {len(run.planned)} registered seeds "
                       f"recorded{got}; no verdict until every seed is in (the registration's "
                       "conduct).")  # fmt: skip
            continue
        checked = judged(run)
        differs = mismatches(run, checked)
        kind = "exploratory: it does not match its registration" if differs else "confirmatory"
        cpus = ", ".join(sorted({rec["run"]["cpu"] for rec in run.records.values()}))
        where = f"{len(done)} seeds ({span(done)}), {cpus}, {kind}"
        out.append(f"- **Run `{name}`**, {where}: {by_family(reg, checked)}.")
        first = families.names(reg)[0]
        for c in (c for c in checked if c.family == first):
            said = "; ".join(f"{k.ordering} by {k.difference}, {k.verdict}" for k in c.checks)
            out.append(f"  - {c.text}: **{c.shown}**. High - low: {said}.")
        if bad := invalid_seeds(run):
            without = by_family(reg, judged(run, tuple(bad)))
            out.append(f"  - Without the seeds where a variant did not form the skill ({bad}), "
                       f"information only: {without}.")  # fmt: skip
    return "\n".join(out)


def with_readme_block(reg: Registration, text: str, lines: str) -> str:
    """text (the README, docs/results.md) with the registration's block holding lines (its
    readme_lines); unchanged where it holds no such block."""
    opening, closing = f"<!-- registered:{reg.name} ", f"<!-- /registered:{reg.name} -->"
    if opening not in text or closing not in text:
        return text
    start = text.index("\n", text.index(opening)) + 1
    return text[:start] + lines + "\n" + text[text.index(closing) :]


def main(argv: list[str] | None = None) -> int:
    parser = Parser("ssmax.registration.judge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    parser.add_argument("--registration", type=Path, default=REGISTRATION)
    args = parser.parse_args(argv)
    reg = load(args.registration)
    lines = readme_lines(reg)  # once for every page that shows them
    pages = {reg.page: page(reg)}
    pages |= {p: with_readme_block(reg, p.read_text(), lines) for p in LINES_IN}
    if args.check:
        stale = [p for p, text in pages.items() if not p.is_file() or p.read_text() != text]
        for p in stale:
            print(f"{shown(p)} is stale: run python -m ssmax.registration.judge{given(reg)}")
        if not stale:
            print(f"{shown(reg.page)} and its lines in the README are up to date")
        return 1 if stale else 0
    for p, text in pages.items():
        if not p.is_file() or p.read_text() != text:
            atomic_write_text(p, text)
            print(f"wrote {shown(p)}")
    return 0


if __name__ == "__main__":
    sys.exit(cli(main))
