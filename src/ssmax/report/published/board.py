"""The leaderboard, the page a reader looks at (issue 60 item 4): one table of every law with
published seeds against (a) and (b) on the headline measures, and one figure of NIAH accuracy by
context, both made from the published files of docs/results/ by `make results-page`
(report.published: the block "leaderboard" of docs/results.md, and FIGURE with its CSV).

What it reads: the runs of report.published.runs (sources(): those SOURCES declares, then every
other published file of docs/results/ as a run of its own, so a new results file needs no code
either). It names no law: every variant of a run that goes through the evals (facts.evals) is
one, so a file that gains a law gains a row and a line, labelled and coloured by its
conf/variant/*.yaml facts. A law that several runs hold gets its row from the first of them; a
declared run whose file is not written yet is said, not tabled.

A row: the law's seeds, run (files) and machine; per headline measure (NIAH past the training
length, top needle score, the loss at each evaluated multiple past it: the runs' union, "-"
where the law's run has none) its paired difference to (a) and to (b) of its own run, positive
on the law's better side, as mean [95% t-interval], with a mark: decided better or worse by the
claims' rule (verdicts.claims, verdicts.multiplicity), else not separated. Decided where:

- a law other than (a) and (b): in its run's family "leaderboard" (verdicts.rivals.board: every law
  of the run against (a) and (b) on the measures, Benjamini-Hochberg), as docs/rival-laws.md
  registered it for the rival laws' run; a run whose leaderboard was not written down before
  its seeds ran (Source.board_registered false: the paper's verdict run) gives its laws'
  effects only, marked untested (·), never a verdict;
- (b) against (a), and (a) against (b), the same ordering read from its other side: in the
  paper's primary family (Holm) on that run, which tests it (verdicts.claims); marked untested
  where no family of the run does.

A base's line for itself is its own mean [95% t-interval].

The figure of NIAH by context under the table, its numbers and its PNG:
report.published.board_figure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from ssmax.config.variants import by_letter, facts, label, ordered
from ssmax.report.published.board_figure import FIGURE, _rel, curves, figure_caption
from ssmax.report.published.runs import Run, Source, load_run, sources, span
from ssmax.verdicts.claims import Checked, Ordering, check, claims, long_multiples
from ssmax.verdicts.metrics import values_of
from ssmax.verdicts.published_file import ROOT
from ssmax.verdicts.results import Results
from ssmax.verdicts.rivals import BASES, NIAH, TOP, better, board, present
from ssmax.verdicts.stats import Interval
from ssmax.verdicts.text import family_text, md_table

MARKS = {"holds": "▲", "contradicted": "▼"}
APART, UNTESTED = "○", "·"  # not separated (inconclusive or not decidable); no family tests it


@dataclass
class Line:
    """One line of a cell: a difference to a base (positive: the law's better side) and its
    mark, or (own) the base's own values."""

    interval: Interval
    mark: str = ""
    own: bool = False
    mirror: bool = False  # (a) against (b): the ordering of (b)'s row, from its other side


@dataclass
class LawRow:
    letter: str
    variant: str
    run: Run
    seeds: list[int]
    cells: dict[str, dict[str, Line]]  # measure -> base letter -> line


@dataclass
class Board:
    rows: list[LawRow]
    measures: list[str]
    families: list[str]  # each run's families, as the page says them
    missing: list[Source]  # runs not written yet


def mark(verdict: str) -> str:
    return MARKS.get(verdict, "" if verdict == "n/a" else APART)


def _line(k: Checked, flip: bool = False) -> Line:
    sign = -1 if flip else 1
    verdict = {"holds": "contradicted", "contradicted": "holds"}.get(k.verdict, k.verdict)
    return Line(Interval.of([sign * d for d in k.differences.values()]),
                mark(verdict if flip else k.verdict))  # fmt: skip


def _base_line(results: Results, primary: dict[str, Checked], o: Ordering) -> Line:
    """A base against the other: the primary family's ordering, read from either side."""
    if o.label() in primary:
        return _line(primary[o.label()])
    other = Ordering(o.metric, o.high, o.low).label()
    if other in primary:
        return _line(primary[other], flip=True)
    k = check(results, "untested", "", [o]).checks[0]
    return Line(Interval.of(list(k.differences.values())), UNTESTED if k.differences else "")


def leaderboard(runs: list[Source] | None = None) -> Board:
    """Every law of the runs (None: sources()), each from the first run that holds it, with
    its cells."""
    rows: list[LawRow] = []
    measures: list[str] = []
    families, missing, taken = [], [], set()
    for source in sources() if runs is None else runs:
        run = load_run(source)
        if run is None:
            missing.append(source)
            continue
        results = run.pub.results()
        letters = present(results, list(run.pub.table))
        laws = [facts(v).letter for v in ordered([by_letter()[x] for x in letters - set(BASES)])]
        new = [facts(v).letter for v in ordered([by_letter()[x] for x in letters - taken])]
        run_measures = [NIAH, TOP, *(f"loss@{k}" for k in long_multiples(results))]
        measures += [m for m in run_measures if m not in measures]
        said = []
        checks: dict[tuple[str, str, str], Checked] = {}
        if laws:  # the run's family: every law of it, whether or not an earlier run has it
            board_rows, family = board(results, laws)
            checks = {(r.law, r.measure, b): k for r in board_rows for b, k in r.against.items()}
            said.append(f"{_letters(laws)}: {family_text(family)}" if source.board_registered
                        else f"{_letters(laws)}: effects only, no leaderboard family "
                        "registered before its seeds ran")  # fmt: skip
        primary: dict[str, Checked] = {}
        if set(new) & set(BASES) == set(BASES):
            judged = [c for c in claims(results) if c.family == "primary"]
            primary = {k.ordering: k for c in judged for k in c.checks}
            if judged:
                said.insert(0, f"(b) against (a): {family_text(judged[0])}")
        if new:
            families.append(f"{source.name}: " + "; ".join(said) + ".")
        for x in new:
            variant = by_letter()[x]
            cells: dict[str, dict[str, Line]] = {}
            for m in run_measures:
                cells[m] = {}
                for base in BASES:
                    if x == base:
                        own = values_of(results, m, variant)
                        cells[m][base] = Line(Interval.of(list(own.values())), own=True)
                    elif x in BASES:
                        cells[m][base] = _base_line(results, primary, better(m, x, base))
                        cells[m][base].mirror = x == BASES[0]
                    elif source.board_registered:
                        cells[m][base] = _line(checks[x, m, base])
                    else:
                        cells[m][base] = replace(_line(checks[x, m, base]), mark=UNTESTED)
            seeds = sorted({s for m in run_measures for s in values_of(results, m, variant)})
            rows.append(LawRow(x, variant, run, seeds, cells))
        taken |= set(new)
    order = {v: i for i, v in enumerate(ordered([r.variant for r in rows]))}
    rows.sort(key=lambda r: order[r.variant])
    return Board(rows, [m for m in [NIAH, TOP] if m in measures] + sorted(
        (m for m in measures if m.startswith("loss@")), key=lambda m: float(m[5:])),
        families, missing)  # fmt: skip


def _letters(laws: list[str]) -> str:
    return ", ".join(f"({x})" for x in laws)


HEADINGS = {NIAH: "NIAH past N", TOP: "top needle score"}


def heading(measure: str) -> str:
    return HEADINGS.get(measure) or f"loss at {measure.removeprefix('loss@')}x"


def line_text(base: str, line: Line) -> str:
    i = line.interval
    if i.n == 0:
        return f"{base}: -"
    if line.own:
        body = f"{i.mean:.2f}" if i.n < 2 else f"{i.mean:.2f} [{i.lo:.2f}, {i.hi:.2f}]"
        return f"{base}: *{body}*"
    body = f"{i.mean:+.2f} (1 seed)" if i.n < 2 else f"{i.mean:+.2f} [{i.lo:+.2f}, {i.hi:+.2f}]"
    return f"{base}: {body}" + (f" {line.mark}" if line.mark else "")


def cell(lines: dict[str, Line] | None) -> str:
    """A law's cell on one measure: its line against (a), then (b); '-' where it has none."""
    if not lines or all(x.interval.n == 0 for x in lines.values()):
        return "-"
    return "<br>".join(line_text(base, lines[base]) for base in BASES)


def row_cells(r: LawRow, measures: list[str]) -> list[str]:
    where = f"seeds {span(r.seeds)} ({len(r.seeds)})<br>{r.run.named}<br>{r.run.machine}"
    return [label(r.variant), where, *(cell(r.cells.get(m)) for m in measures)]


LEGEND = (
    "Each cell: the law's paired difference to (a), then to (b), of its own run (same seeds, "
    "same data order), mean [95% t-interval], positive on the law's better side (lower loss; "
    "higher NIAH accuracy and needle score); NIAH and loss under RoPE theta x50 at the evals, "
    "NIAH past N the mean over 2x-20x of the training length. ▲ decided better, ▼ decided "
    "worse (the claims' rule: both corrected p below 0.05), ○ not separated (inconclusive, or "
    "not decidable below its family's permutation floor), · no family tests it; *italic*: the "
    "base itself, its own mean [95% t-interval]; - the run did not measure it. The laws of a "
    "run are decided in its family leaderboard (every law against (a) and (b), Benjamini-"
    "Hochberg) where that family was registered before its seeds ran (the rival laws' run: "
    "docs/rival-laws.md; the arms' run: its registration); a run without one (the paper's "
    "verdict runs, the confirmatory one included) gives its laws' effects only (·), and there "
    "(b) against (a) is the ordering of the paper's primary claims, decided in that family "
    "(Holm). A registered run is tabled only once every seed it plans is recorded. Each law's "
    "row is from the first run below that holds it."
)


def run_line(run: Run) -> str:
    if run.source.registered:  # one folder of seed records
        (info,), (path, _) = run.runs, run.source.registered
        return (f"- {run.source.name}: {run.named} (seeds {span(info['seeds'])}, "
                f"{info['date']}, at {info['commit']}, {run.machines[0]}), registered before its "
                f"seeds ran ({_shown(path.with_suffix('.md'))}; whether it matches its "
                f"registration: {_shown(info['page'])}); preset {info['preset']}.")  # fmt: skip
    parts = [f"{_shown(f)} (seeds {span(r['seeds'])}, {r['date']}, at {r['commit']}, {m})"
             for f, r, m in zip(run.files, run.runs, run.machines, strict=True)]  # fmt: skip
    return f"- {run.source.name}: " + " + ".join(parts) + f"; preset {run.pub.run['preset']}."


def not_in_yet(source: Source) -> str:
    """A run not tabled yet; a registered one: until its last seed is recorded (no look before)."""
    if source.registered:
        return (f"- not in yet: {source.name}, tabled once every seed it plans is recorded "
                f"({_shown(source.files[0])}/)")  # fmt: skip
    return f"- not in yet: {source.name} ({', '.join(f.name for f in source.files)})"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def board_block(runs: list[Source] | None = None) -> str:
    """docs/results.md's leaderboard block (runs None: sources()): the table, its legend and
    runs, the figure."""
    runs = sources() if runs is None else runs
    b = leaderboard(runs)
    if not b.rows:
        return "Not in yet: no published run."
    lines = [x for r in b.rows for c in r.cells.values() for x in c.values()
             if not x.own and not x.mirror and x.mark not in ("", UNTESTED)]  # fmt: skip
    count = Counter(x.mark for x in lines)
    head = (f"{len(b.rows)} laws, each against (a) and (b) on {len(b.measures)} headline "
            f"measures: {count[MARKS['holds']]} differences decided better, "
            f"{count[MARKS['contradicted']]} decided worse, {count[APART]} not separated (of "
            f"{len(lines)} a family tests, (a) against (b) counted once).")  # fmt: skip
    columns = ["law", "seeds, run, machine", *(heading(m) for m in b.measures)]
    shown = list({id(r.run): r.run for r in b.rows}.values())
    out = [head, "", *md_table(columns, [row_cells(r, b.measures) for r in b.rows]), "",
           LEGEND, "", "Families: " + " ".join(b.families), "", "Runs:", "",
           *(run_line(r) for r in shown)]  # fmt: skip
    out += [not_in_yet(s) for s in b.missing]
    found = curves([r for r in (load_run(s) for s in runs) if r])
    out += ["", f"![NIAH accuracy by context, every law]({_rel(FIGURE)})", "",
            figure_caption(found)]  # fmt: skip
    return "\n".join(out)
