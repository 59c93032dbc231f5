"""The leaderboard, the page a reader looks at (issue 60 item 4): one table of every law with
published seeds against (a) and (b) on the headline measures, and one figure of NIAH accuracy by
context, both made from the published files of docs/results/ by `make results-page`
(report.published: the block "leaderboard" of docs/results.md, and FIGURE with its CSV).

What it reads (sources()): runs, each a published file and the files that add seeds to it
(joined as report.published_file.extended joins them): those SOURCES declares, then every other
published file of docs/results/ (a "results" and a "run", its seeds not only the design's) as a
run of its own, so a new results file needs no code either (a file of added seeds is joined
only where SOURCES says so). It names no law: every variant of a run that goes through the
evals (facts.evals) is one, so a file that gains a law gains a row and a line, labelled and
coloured by its conf/variant/*.yaml facts. A law that several runs hold gets its row from the
first of them; a declared run whose file is not written yet is said, not tabled.

A row: the law's seeds, run (files) and machine; per headline measure (NIAH past the training
length, top needle score, the loss at each evaluated multiple past it: the runs' union, "-"
where the law's run has none) its paired difference to (a) and to (b) of its own run, positive
on the law's better side, as mean [95% t-interval], with a mark: decided better or worse by the
claims' rule (report.claims, report.multiplicity), else not separated. Decided where:

- a law other than (a) and (b): in its run's family "leaderboard" (report.rivals.board: every law
  of the run against (a) and (b) on the measures, Benjamini-Hochberg), as docs/rival-laws.md
  registered it for the rival laws' run; a run whose leaderboard was not written down before
  its seeds ran (Source.board_registered false: the paper's verdict run) gives its laws'
  effects only, marked untested (·), never a verdict;
- (b) against (a), and (a) against (b), the same ordering read from its other side: in the
  paper's primary family (Holm) on that run, which tests it (report.claims); marked untested
  where no family of the run does.

A base's line for itself is its own mean [95% t-interval].

The figure: per law, its mean NIAH accuracy at each evaluated context (theta x50, after SFT) over
the seeds that hold every context, with the 95% t-interval as a band (3 seeds or more; fewer: a
dashed line, no band), from the run where the law has the most such seeds (ties: the first of
SOURCES). Its numbers are FIGURE_CSV; the PNG carries their sha256 in its metadata (Source), which
`--check` reads: the check holds the data, not the bytes (another machine's fonts may draw other
bytes), and `make results-page` draws it again (Agg, no date or version in the file: the same
venv gives the same bytes).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import reduce
from pathlib import Path

from ssmax.config.variants import by_letter, color, facts, label, ordered
from ssmax.report.claims import Checked, Ordering, check, claims, long_multiples
from ssmax.report.gather import Results, Table
from ssmax.report.metrics import values_of
from ssmax.report.plotting import new_figure
from ssmax.report.published_file import EXTENSION, PUBLISHED, ROOT, Published, extended, load
from ssmax.report.published_rivals import RIVALS
from ssmax.report.render import _md_table, family_text
from ssmax.report.rivals import BASES, NIAH, TOP, better, board, present
from ssmax.report.stats import Interval


@dataclass
class Source:
    """One run as published: its file, then the files that add seeds to it."""

    name: str  # how the page names the run
    files: tuple[Path, ...]
    machines: dict[str, str] = field(default_factory=dict)  # file name -> machine, where the
    # file does not say it (run.cpu / run.device / run.machine)
    board_registered: bool = True  # its leaderboard family was written down before its seeds
    # ran; else its laws' cells give effects only (·), never a verdict


SOURCES = [
    # seeds 3-10 ran on the project's 2-core Xeon (docs/results.md), a file older than run.cpu
    Source(
        "the paper's verdict run",
        (PUBLISHED, EXTENSION),
        {PUBLISHED.name: "Xeon"},
        board_registered=False,
    ),
    Source("the rival laws' run", (RIVALS,)),
]
RESULTS = ROOT / "docs" / "results"  # where other published files are found (sources())
FIGURE = ROOT / "docs" / "figures" / "leaderboard_niah.png"
FIGURE_CSV = FIGURE.with_suffix(".csv")
MARKS = {"holds": "▲", "contradicted": "▼"}
APART, UNTESTED = "○", "·"  # not separated (inconclusive or not decidable); no family tests it
BAND_SEEDS = 3  # fewer seeds: the t-interval spans most of [0, 1]; a dashed line, no band
NIAH_AT = re.compile(r"niah @([\d.]+)x")  # results.json's accuracy at one context (theta x50)


def sources(declared: list[Source] = SOURCES, folder: Path = RESULTS) -> list[Source]:
    """The declared runs, then each other published file of the folder as a run (by name):
    shaped as one ("results" and "run") and not of design seeds only (they decide nothing)."""
    named = {f.resolve() for s in declared for f in s.files}
    found = []
    for path in sorted(folder.glob("*.json")):
        if path.resolve() in named:
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        run = data.get("run") if isinstance(data, dict) else None
        if not isinstance(run, dict) or "results" not in data:
            continue
        design = set((run.get("design") or {}).get("seeds") or [])
        if not (design and set(run.get("seeds") or []) <= design):
            found.append(Source(path.stem, (path,)))
    return [*declared, *found]


@dataclass
class Run:
    source: Source
    pub: Published  # the files joined (the published file's metrics): the table's values
    table: Table  # every metric of every file: the figure's values
    files: list[Path]
    runs: list[dict]  # each file's run (seeds, commit, date, ...)
    machines: list[str]  # each file's machine

    @property
    def machine(self) -> str:
        if len(set(self.machines)) == 1:
            return self.machines[0]
        return ", ".join(f"{m} ({span(r['seeds'])})" for r, m in zip(self.runs, self.machines,
                                                                     strict=True))  # fmt: skip


def load_run(source: Source) -> Run | None:
    """The run, None while its first file is not written yet."""
    files = [f for f in source.files if f.is_file()]
    if not files or files[0] != source.files[0]:
        return None
    pubs = [load(f) for f in files]
    table = {v: {m: dict(by) for m, by in ms.items()} for v, ms in pubs[0].table.items()}
    for added in pubs[1:]:
        for v, ms in added.table.items():
            for m, by in ms.items():
                table.setdefault(v, {}).setdefault(m, {}).update(by)
    machines = [_machine(p, f, source) for p, f in zip(pubs, files, strict=True)]
    return Run(source, reduce(extended, pubs), table, files, [p.run for p in pubs], machines)


def _machine(pub: Published, path: Path, source: Source) -> str:
    said = pub.run.get("cpu") or pub.run.get("device") or pub.run.get("machine")
    return said or source.machines.get(path.name, "not in the file")


def span(seeds: list[int]) -> str:
    """'3-12' for a run of consecutive seeds, else '3, 5, 9'."""
    seeds = sorted(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


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
                        else f"{_letters(laws)}: effects only, no family registered before "
                        "its seeds ran")  # fmt: skip
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
    files = " + ".join(f.name for f in r.run.files)
    where = f"seeds {span(r.seeds)} ({len(r.seeds)})<br>{files}<br>{r.run.machine}"
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
    "Hochberg), as docs/rival-laws.md registered it for the rival laws' run before their seeds "
    "ran; the paper's verdict run had no leaderboard registered before its seeds ran, so its "
    "laws' cells give effects only (·), and there (b) against (a) is the ordering of the "
    "paper's primary claims, decided in that family (Holm). Each law's row is from the first "
    "run below that holds it."
)


def run_line(run: Run) -> str:
    parts = [f"{_shown(f)} (seeds {span(r['seeds'])}, {r['date']}, at {r['commit']}, {m})"
             for f, r, m in zip(run.files, run.runs, run.machines, strict=True)]  # fmt: skip
    return f"- {run.source.name}: " + " + ".join(parts) + f"; preset {run.pub.run['preset']}."


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
    out = [head, "", *_md_table(columns, [row_cells(r, b.measures) for r in b.rows]), "",
           LEGEND, "", "Families: " + " ".join(b.families), "", "Runs:", "",
           *(run_line(r) for r in shown)]  # fmt: skip
    out += [f"- not in yet: {s.name} ({', '.join(f.name for f in s.files)})" for s in b.missing]
    found = curves([r for r in (load_run(s) for s in runs) if r])
    out += ["", f"![NIAH accuracy by context, every law]({_rel(FIGURE)})", "",
            figure_caption(found)]  # fmt: skip
    return "\n".join(out)


def _rel(path: Path) -> str:
    """A path as docs/results.md links it."""
    return str(path.relative_to(ROOT / "docs"))


@dataclass
class Curve:
    variant: str
    run: Run
    seeds: list[int]
    multiples: list[str]  # as the file names them, in numeric order
    intervals: list[Interval]  # per multiple, over the seeds


def curves(runs: list[Run]) -> list[Curve]:
    """Every law's NIAH accuracy by context, from the run where it has the most seeds holding
    every context (ties: the first run)."""
    best: dict[str, Curve] = {}
    for run in runs:
        for v in run.table:
            if v not in by_letter().values() or not facts(v).evals:
                continue
            columns = run.table[v]
            ks = sorted({m[1] for c in columns if (m := NIAH_AT.fullmatch(c))}, key=float)
            if len(ks) < 2:
                continue
            seeds = sorted(set.intersection(*(set(columns[f"niah @{k}x"]) for k in ks)))
            if seeds and (v not in best or len(seeds) > len(best[v].seeds)):
                values = [[columns[f"niah @{k}x"][s] for s in seeds] for k in ks]
                best[v] = Curve(v, run, seeds, ks, [Interval.of(x) for x in values])
    return [best[v] for v in ordered(list(best))]


CSV_COLUMNS = ["law", "variant", "run", "seeds", "context (x N)", "n", "mean", "lo95", "hi95"]


def figure_csv(found: list[Curve]) -> str:
    """The figure's numbers, a row per law and context."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for c in found:
        files = " + ".join(f.name for f in c.run.files)
        for k, i in zip(c.multiples, c.intervals, strict=True):
            writer.writerow([f"({facts(c.variant).letter})", c.variant, files, span(c.seeds), k,
                             i.n, *(_num(x) for x in (i.mean, i.lo, i.hi))])  # fmt: skip
    return buffer.getvalue()


def _num(x: float) -> str:
    return "" if x != x else f"{x:.6f}"  # nan: no interval (1 seed)


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def figure_caption(found: list[Curve]) -> str:
    if not found:
        return "No law of these runs has NIAH accuracy per context."
    each = "; ".join(f"{label(c.variant)}: {' + '.join(f.name for f in c.run.files)}, seeds "
                     f"{span(c.seeds)} ({len(c.seeds)})" for c in found)  # fmt: skip
    return (f"NIAH accuracy (full number, 20 prompts a context and seed) by context, a multiple "
            f"of the training length, RoPE theta x50, after SFT: the mean over the seeds that "
            f"hold every context, with its 95% t-interval as a band ({BAND_SEEDS} seeds or "
            f"more; fewer: dashed, no band). {each}. Numbers: "
            f"[{_rel(FIGURE_CSV)}]({_rel(FIGURE_CSV)}).")  # fmt: skip


def draw(found: list[Curve], csv_text: str) -> bytes:
    """The PNG: a line per law (its facts' label and colour), the data's digest in its
    metadata, no date or software version (the same venv draws the same bytes)."""
    fig, (ax,) = new_figure(1, width=8.0, height=5.6)
    ticks: set[float] = set()
    for c in found:
        xs = [float(k) for k in c.multiples]
        ticks |= set(xs)
        band = len(c.seeds) >= BAND_SEEDS
        name = f"{label(c.variant)} ({len(c.seeds)} seeds{'' if band else ', no band'})"
        ax.plot(xs, [i.mean for i in c.intervals], marker="o", ms=3, lw=1.4,
                ls="-" if band else "--", color=color(c.variant), label=name)  # fmt: skip
        if band:
            lo = [max(0.0, i.lo) for i in c.intervals]
            hi = [min(1.0, i.hi) for i in c.intervals]
            ax.fill_between(xs, lo, hi, color=color(c.variant), alpha=0.1, lw=0)
    ax.set_xticks(sorted(ticks), [f"{x:g}x" for x in sorted(ticks)])
    n = {c.run.pub.run["train_len"] for c in found}
    ax.set(xlabel=f"context (multiple of the training length N = {', '.join(map(str, n))} "
           "tokens), RoPE theta x50, after SFT", ylabel="NIAH accuracy", ylim=(-0.02, 1.02),
           xlim=(0.5, max(ticks, default=1) + 0.5))  # fmt: skip
    ax.set_title("NIAH accuracy by context: mean over seeds, 95% t-interval", fontsize=10)
    ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncols=3, fontsize=7, frameon=False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110,
                metadata={"Software": None, "Source": digest(csv_text)})  # fmt: skip
    return buffer.getvalue()


def png_source(path: Path) -> str | None:
    """The Source text of a PNG's metadata (the digest of the numbers it was drawn from)."""
    from PIL import Image  # matplotlib's own dependency

    with Image.open(path) as image:
        return image.text.get("Source")


def figure_files(runs: list[Source] | None = None) -> tuple[str, list[Curve]]:
    """(the CSV's text, the curves) of the runs (None: sources())."""
    found = curves([r for r in (load_run(s) for s in (sources() if runs is None else runs)) if r])
    return figure_csv(found), found


def figure_stale(csv_text: str, png: Path = FIGURE, table: Path = FIGURE_CSV) -> bool:
    """Whether the committed figure is not the one these numbers give."""
    if not table.is_file() or table.read_text() != csv_text or not png.is_file():
        return True
    return png_source(png) != digest(csv_text)
