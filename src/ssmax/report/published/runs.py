"""The runs the leaderboard reads (report.published.board, issue 60 item 4), each a published
file of docs/results/ and the files that add seeds to it, joined as
verdicts.published_file.extended joins them.

sources(): first every run of every registration of docs/registration/ (their seed records,
docs/results/<name>/<run>/seed<S>.json), each tabled only once every seed it plans is recorded
(the registration's conduct: no look before), then those SOURCES declares, then every other
published file of docs/results/ (a "results" and a "run", its seeds not only the design's) as a
run of its own, so a new results file or registration needs no code (a file of added seeds is
joined only where SOURCES says so).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

from ssmax.report.published.rivals import RIVALS
from ssmax.verdicts.published_file import EXTENSION, PUBLISHED, ROOT, Published, extended, load
from ssmax.verdicts.registered import gather, is_paper, names, shown
from ssmax.verdicts.registered import load as load_registration
from ssmax.verdicts.results import Table


@dataclass
class Source:
    """One run as published: its file, then the files that add seeds to it."""

    name: str  # how the page names the run
    files: tuple[Path, ...]
    machines: dict[str, str] = field(default_factory=dict)  # file name -> machine, where the
    # file does not say it (run.cpu / run.device / run.machine)
    board_registered: bool = True  # its leaderboard family was written down before its seeds
    # ran; else its laws' cells give effects only (·), never a verdict
    registered: tuple[Path, str] | None = None  # a registered run: (its registration, the
    # run's name); files: its records' folder


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
REGISTRATIONS = ROOT / "docs" / "registration"  # the registered runs (sources())


def registered_sources(folder: Path = REGISTRATIONS) -> list[Source]:
    """Every run of every registration of the folder, those that judge the paper's claims first
    (their (a) and (b) rows are the primary family's), then by name, each registration's runs
    in its file's order: its seed records' folder as its file; decided in its leaderboard family
    where it registered one."""
    out = []
    regs = [load_registration(path) for path in folder.glob("*.json")]
    for reg in sorted(regs, key=lambda r: (not is_paper(r), r.name)):
        board = "leaderboard" in names(reg)
        for run in reg.runs:
            name = f"the registered run {run} of {reg.name}"
            out.append(Source(name, (reg.records(run),), board_registered=board,
                              registered=(reg.path, run)))  # fmt: skip
    return out


def sources(
    declared: list[Source] = SOURCES,
    folder: Path = RESULTS,
    registrations: Path | None = REGISTRATIONS,
) -> list[Source]:
    """The registered runs (registrations: their folder; None: none), the declared runs, then
    each other published file of the folder as a run (by name): shaped as one ("results" and
    "run") and not of design seeds only (they decide nothing)."""
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
    registered = registered_sources(registrations) if registrations else []
    return [*registered, *declared, *found]


@dataclass
class Run:
    source: Source
    pub: Published  # the files joined (the published file's metrics): the table's values
    table: Table  # every metric of every file: the figure's values
    files: list[Path]
    runs: list[dict]  # each file's run (seeds, commit, date, ...)
    machines: list[str]  # each file's machine

    @property
    def named(self) -> str:
        """Its files as the pages name them: a file by its name, a registered run's seed records
        by their folder."""
        return " + ".join(f"{shown(f)}/" if f.is_dir() else f.name for f in self.files)

    @property
    def machine(self) -> str:
        if len(set(self.machines)) == 1:
            return self.machines[0]
        return ", ".join(f"{m} ({span(r['seeds'])})" for r, m in zip(self.runs, self.machines,
                                                                     strict=True))  # fmt: skip


def load_run(source: Source) -> Run | None:
    """The run, None while its first file is not written yet (a registered run: while a seed
    it plans has no record)."""
    if source.registered:
        return _registered_run(source)
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


def _registered_run(source: Source) -> Run | None:
    """A registered run as one published file: every recorded seed's values, once every seed
    it plans is recorded; its machines by seed; its page, which says whether it matches its
    registration (ssmax.registration.judge)."""
    path, name = source.registered  # type: ignore[misc]
    run = gather(load_registration(path), name)
    if not run.records or not run.complete:
        return None
    records = [run.records[s] for s in sorted(run.records)]
    said = [r["run"] for r in records]
    dates, commits = sorted({r["date"] for r in said}), sorted({str(r["commit"]) for r in said})
    info = {"preset": said[0]["preset"], "seeds": sorted(run.records),
            "train_len": said[0]["train_len"], "commit": ", ".join(commits),
            "date": " to ".join(dict.fromkeys([dates[0], dates[-1]])),
            "page": run.reg.page}  # fmt: skip
    by_machine: dict[str, list[int]] = {}
    for seed, r in zip(info["seeds"], said, strict=True):
        where = r.get("cpu") or r.get("device") or "not in the record"
        by_machine.setdefault(where, []).append(seed)
    machine = ", ".join(by_machine) if len(by_machine) == 1 else ", ".join(
        f"{m} ({span(seeds)})" for m, seeds in by_machine.items())  # fmt: skip
    pub = Published(run.table(), info)
    return Run(source, pub, pub.table, list(source.files), [info], [machine])


def _machine(pub: Published, path: Path, source: Source) -> str:
    said = pub.run.get("cpu") or pub.run.get("device") or pub.run.get("machine")
    return said or source.machines.get(path.name, "not in the file")


def span(seeds: list[int]) -> str:
    """'3-12' for a run of consecutive seeds, else '3, 5, 9'."""
    seeds = sorted(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))
