"""A published run as data: a file of docs/results/ shaped as the report's results.json
(variant -> metric -> seed -> value) with what the run was, how it is read (`load`) and how it
is written from a run's report node (`run_file`). The pages made from such files:
report.published (the paper's verdict run) and report.published.rivals (issue 43)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssmax.config.variants import facts
from ssmax.verdicts.multiplicity import UNDECIDABLE
from ssmax.verdicts.replicate import as_table, judgeable, read_json, read_table
from ssmax.verdicts.results import Results, Settings, Table

ROOT = Path(__file__).resolve().parents[3]  # the repository, where docs/ lies
PUBLISHED = ROOT / "docs" / "results" / "verdict_seeds3-10.json"
EXTENSION = ROOT / "docs" / "results" / "verdict_seeds11-12.json"  # added seeds (--extend)


@dataclass
class Published:
    table: Table  # variant -> metric -> seed -> value
    run: dict  # preset, seeds, train_len, commit, date, command
    absent: dict[str, str] = field(default_factory=dict)  # metric -> why the file lacks it
    digits: dict[str, int] = field(default_factory=dict)  # decimals as published (default 3)
    old_rule: dict[str, str] = field(default_factory=dict)  # claim -> verdict, the old rule

    def results(self) -> Results:
        """The file as the claims read it."""
        settings = Settings(self.run["preset"], list(self.run["seeds"]), self.run["train_len"])
        return Results(settings, {}, table=self.table, absent=self.absent)

    def fmt(self, metric: str, value: float) -> str:
        return f"{value:.{self.digits.get(metric, 3)}f}"


RUN_KEYS = ("preset", "seeds", "train_len", "commit", "date")  # what the pages say of a run


def load(path: Path = PUBLISHED) -> Published:
    """A published file; one line naming it where it is missing, empty, not JSON, not shaped
    as one (its values under "results", its run under "run") or with too little to judge."""
    data = read_json(path)
    if "results" not in data or not isinstance(data.get("run"), dict):
        raise SystemExit(f"{path}: not a published file: its values belong under \"results\" "
                         f"and its run under \"run\" ({', '.join(RUN_KEYS)})")  # fmt: skip
    run = data["run"]
    if missing := [k for k in RUN_KEYS if k not in run]:
        raise SystemExit(f'{path}: its "run" lacks {", ".join(missing)}')
    table = judgeable(as_table(data["results"], path), path)
    seeds = run["seeds"]
    if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
        raise SystemExit(f"{path}: run.seeds must be a list of integers, not {seeds!r}")
    if extra := sorted({s for ms in table.values() for by in ms.values() for s in by}
                       - set(seeds)):  # fmt: skip
        raise SystemExit(f"{path}: values of seeds {extra}, which run.seeds {seeds} lacks")
    old = data.get("old_rule", {}).get("verdicts", {})
    return Published(table, run, data.get("absent", {}), data.get("digits", {}), old)


def extended(pub: Published, ext: Published) -> Published:
    """The published seeds and the extension's together, for the metrics the published file
    holds (a metric only the added seeds have stays out: its orderings stay n/a)."""
    if overlap := set(pub.run["seeds"]) & set(ext.run["seeds"]):
        raise SystemExit(f"the extension repeats published seeds {sorted(overlap)}")
    table = {v: {m: {**by_seed, **ext.table.get(v, {}).get(m, {})} for m, by_seed in ms.items()}
             for v, ms in pub.table.items()}  # fmt: skip
    run = {**pub.run, "seeds": sorted([*pub.run["seeds"], *ext.run["seeds"]])}
    return Published(table, run, pub.absent, pub.digits, pub.old_rule)


def skill_floor(pub: Published) -> float:
    """The NIAH at 1x below which a seed's variant did not form the skill: the run's
    preset.design.falls_below, else the tiny preset's 0.5 (the verdict files of issue 42 keep
    no design; tests/test_published.py holds the two equal)."""
    return float(pub.run.get("design", {}).get("falls_below", 0.5))


def skill_line(failed: list[int], without: list[str], floor: float) -> str:
    """The sentence beside a verdict where some seeds' variants did not form the skill."""
    if not failed:
        return (f"In every seed every variant formed the skill at the training length (NIAH at "
                f"1x >= {floor:g}).")  # fmt: skip
    many = len(failed) > 1
    stay, them = ("they stay", "them") if many else ("it stays", "it")
    return (f"In seed{'s' * many} {', '.join(map(str, failed))} a variant did not form the skill "
            f"at the training length (NIAH at 1x below {floor:g}): {stay} in every verdict. "
            f"Without {them}, as information only: {counts(without)}.")  # fmt: skip


def letter(variant: str) -> str:
    return "(p_n)" if variant == "pn_rationale" else f"({facts(variant).letter})"


def counts(verdicts: list[str]) -> str:
    """'2 hold, 4 contradicted, 13 inconclusive' (not decidable and n/a where any)."""
    c = Counter(verdicts)
    parts = (
        [
            f"{c['holds']} hold",
            f"{c['contradicted']} contradicted",
            f"{c['inconclusive']} inconclusive",
        ]
        + ([f"{c[UNDECIDABLE]} {UNDECIDABLE}"] if c[UNDECIDABLE] else [])
        + ([f"{c['n/a']} n/a"] if c["n/a"] else [])
    )
    return ", ".join(parts)  # fmt: skip


def not_in_yet(path: Path, how: str) -> str:
    """A generated block's text while its file is not written yet."""
    return f"Not in yet: {path.relative_to(ROOT)} ({how})."


def report_node(results: Path) -> tuple[DictConfig, dict]:
    """The config and done record of the report node that wrote results.json (in the node's
    folder: results.json's, or its parent, as the report node keeps it in report/)."""
    near = (results.parent, results.parent.parent)
    node = next((d for d in near if (d / "done.json").is_file()), None)
    if node is None or not (node / "config.yaml").is_file():
        raise SystemExit(f"{results} is not in a report node's folder (done.json and "
                         f"config.yaml beside it or in {results.parent.parent})")  # fmt: skip
    return OmegaConf.load(node / "config.yaml"), json.loads((node / "done.json").read_text())


def run_file(results: Path, seeds: list[int], about: str) -> dict:
    """A published file's content from a run's results.json: the given seeds' values, the
    run's preset, design and train length from its report node's config.yaml, its commit and
    machine from the node's done record (report_node)."""
    cfg, record = report_node(results)
    values = {
        v: {m: {str(s): x for s, x in by_seed.items() if s in seeds} for m, by_seed in ms.items()}
        for v, ms in read_table(results).items()
    }
    run = {
        "preset": cfg.preset.name,
        "seeds": seeds,
        "train_len": int(cfg.data.seq_len),
        "design": (OmegaConf.to_container(cfg.preset.design)
                   if cfg.preset.get("design") is not None else None),  # smoke has none
        "commit": record.get("git_commit", "?")[:7],
        "date": date.today().isoformat(),
        "cpu": record.get("cpu", "?"),
        "packages_sha": record.get("packages_sha", "?"),
    }  # fmt: skip
    return {"about": about, "run": run, "results": values}
