"""A registration as data: docs/registration/<name>.json, the machine-readable twin of the page
beside it. What a confirmatory run must match (seeds, variants, preset, the commit its nodes
ran) and the rule that judges it, fixed before any of its seeds ran; the seeds a run plans (a
seed that failed twice replaced by the next spare) and what it has recorded
(docs/results/<name>/<run>/seed<S>.json). Data only: ssmax.registration runs the seeds and
judges them; report.published.runs tables a complete run in the leaderboard."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ssmax.verdicts.results import Table

ROOT = Path(__file__).resolve().parents[3]  # the repository, where docs/ lies
REGISTRATION = ROOT / "docs" / "registration" / "confirmatory-2026-11-29.json"
DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")  # a registration's name ends in its date
DESIGN = "design"  # the records of the design seeds: docs/results/<name>/design/, not a run


def shown(path: Path) -> str:
    """The path from the repository's root, however it was given (the pages say the same)."""
    full = Path(path).resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else str(path)


@dataclass(frozen=True)
class Registration:
    name: str  # the file's stem; its seed records lie in docs/results/<name>/<run>/
    code_commit: str  # every node of every seed ran this commit's code
    preset: str
    pipeline: str  # pipelines/<pipeline>.yaml
    variants: tuple[str, ...]
    seeds: tuple[int, ...]  # the registered seeds, in the order they run
    spares: tuple[int, ...]  # taken in order for a seed that fails twice for a technical cause
    primary: tuple[str, ...]  # the primary family's ordering labels (verdicts.claims); () where
    # the registration judges other families only (rule.families: each with its orderings)
    runs: dict[str, dict]  # run name (cpu, gpu) -> its machine, seeds and how it is run
    data: dict  # the whole file
    path: Path = REGISTRATION
    design_seeds: tuple[int, ...] = ()  # run first, at code_commit on the cpu; decide nothing

    def records(self, run: str) -> Path:
        """The folder of one run's seed records: docs/results/<name>/<run>/ beside the
        registration's docs/registration/."""
        return self.path.parent.parent / "results" / self.name / run

    def orderings(self, family: str) -> tuple[str, ...]:
        """A registered family's ordering labels ('x < y on metric'), as verdicts.claims names
        them; () where the family lists none (it is every ordering of a kind, in words)."""
        listed = self.data["rule"]["families"].get(family, {}).get("orderings", ())
        return tuple(listed) if isinstance(listed, list) else ()

    def seeds_of(self, run: str) -> tuple[int, ...]:
        """A run's seeds; DESIGN: the design seeds."""
        if run == DESIGN:
            return self.design_seeds
        return tuple(self.runs[run].get("seeds", self.seeds))

    @property
    def page(self) -> Path:
        """The run's generated page, docs/<name less its date>.md beside docs/registration/:
        docs/confirmatory.md, docs/arms.md."""
        return self.path.parent.parent / f"{DATED.sub('', self.name)}.md"


def _known() -> str:
    return ", ".join(shown(p) for p in sorted(REGISTRATION.parent.glob("*.json")))


def load(path: Path = REGISTRATION) -> Registration:
    """The registration at path; a one-line SystemExit naming what is missing or malformed."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SystemExit(f"no registration at {path}; registered: {_known()}") from None
    except IsADirectoryError:
        raise SystemExit(f"{path} is a folder; a registration is its .json file: "
                         f"{_known()}") from None  # fmt: skip
    except json.JSONDecodeError as e:  # its page (.md) given for it, most likely
        raise SystemExit(f"{path} is not JSON ({e.msg}, line {e.lineno}); a registration is "
                         f"its .json file: {_known()}") from None  # fmt: skip
    try:
        return Registration(
            name=path.stem, code_commit=str(data["code_commit"]), preset=str(data["preset"]),
            pipeline=str(data["pipeline"]), variants=tuple(data["variants"]),
            seeds=tuple(int(s) for s in data["seeds"]),
            spares=tuple(int(s) for s in data.get("spares", ())),
            primary=tuple(data["rule"]["families"].get("primary", {}).get("orderings", ())),
            runs=dict(data["runs"]), data=data, path=path,
            design_seeds=tuple(int(s) for s in data.get("design_seeds", ())),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise SystemExit(f"{path} is not a registration: {type(e).__name__} {e}") from None


def cli(main: Callable[[list[str] | None], int]) -> int:
    """A registration command's entry: a refusal (a SystemExit with a message, raised anywhere
    below main) as one line `error: <message>` on stderr and exit status 2, as the project's
    other entries say a bad input; argparse's own exits pass through."""
    try:
        return main(None)
    except SystemExit as refusal:
        if refusal.code is None or isinstance(refusal.code, int):
            raise
        print(f"error: {refusal.code}", file=sys.stderr)
        return 2


def record_path(reg: Registration, run: str, seed: int, failed: bool = False) -> Path:
    return reg.records(run) / f"seed{seed}{'.failed' if failed else ''}.json"


def planned(reg: Registration, run: str) -> list[int]:
    """The run's seeds in order, each seed with a failure record replaced by the next spare
    (a spare that failed too by the one after it); DESIGN: the design seeds as registered
    (spares stand in for verdict seeds only)."""
    if run == DESIGN:
        return list(reg.design_seeds)
    spares, out = list(reg.spares), []
    for seed in reg.seeds_of(run):
        while record_path(reg, run, seed, failed=True).is_file():
            if not spares:
                raise SystemExit(f"seed {seed} failed and no spare seed is left")
            seed = spares.pop(0)
        out.append(seed)
    return out


def to_run(reg: Registration, run: str) -> list[int]:
    """The planned seeds without a record yet (nor a failure record: a design seed's), in
    order."""
    return [s for s in planned(reg, run) if not record_path(reg, run, s).is_file()
            and not record_path(reg, run, s, failed=True).is_file()]  # fmt: skip


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


PAPER = ("primary", "secondary")  # verdicts.claims.claims() makes both at once
KNOWN = (*PAPER, "rivals", "leaderboard")


def names(reg: Registration) -> list[str]:
    """The registered families, in the registration's order."""
    out = list(reg.data["rule"]["families"])
    unknown = [f for f in out if f not in KNOWN]
    if unknown:
        raise SystemExit(f"{reg.name}: the judge knows no family {unknown[0]!r} ({KNOWN})")
    return out


def is_paper(reg: Registration) -> bool:
    return bool(set(names(reg)) & set(PAPER))
