"""The rival laws' pages (issue 43), made from their files in docs/results/ as
report.published makes the paper's: the verdict run's claims of the rivals' papers, the
leaderboard and every seed's values (docs/results.md, one line in the README), and the design
seeds' criteria (docs/rival-laws.md). `python -m ssmax.report.published --rivals` and
`--rivals-design` write the files from a run's results.json."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ssmax.config.variants import ordered
from ssmax.verdicts.design import DESIGN_COLUMNS, design_rows, without_failed
from ssmax.verdicts.published_file import (
    ROOT,
    Published,
    counts,
    letter,
    load,
    not_in_yet,
    report_node,
    run_file,
    skill_floor,
    skill_line,
)
from ssmax.verdicts.replicate import read_judgeable
from ssmax.verdicts.results import Design
from ssmax.verdicts.rivals import leaderboard, rival_claims
from ssmax.verdicts.text import (
    BOARD_COLUMNS,
    BOARD_NOTE,
    CLAIM_COLUMNS,
    RIVALS_NOTE,
    board_line,
    board_rows,
    claim_rows,
    md_table,
)

# the rival laws' verdict run (--rivals) and their design seeds' run on the CPU (--rivals-design)
RIVALS = ROOT / "docs" / "results" / "rival_laws_seeds3-12.json"
RIVAL_SEEDS = list(range(3, 13))  # its seeds, fixed before they ran (docs/rival-laws.md)
RIVALS_DESIGN = ROOT / "docs" / "results" / "rival_laws_design_cpu_2026-11-28.json"
# the leaderboard's measures, as the file names them, for its per-seed table
RIVAL_MEASURES = ["niah past 1x", "needle top mean", "loss @5x", "loss @10x", "loss @20x"]


def rival_laws(path: Path, short: bool) -> str:
    """The rival laws' verdict run (issue 43): their papers' claims (family rivals, Holm), the
    leaderboard (family leaderboard, Benjamini-Hochberg) and every seed's values."""
    if not path.is_file():
        return not_in_yet(path, "the verdict run of docs/rival-laws.md; --rivals writes it")
    pub = load(path)
    results, variants, seeds = pub.results(), ordered(list(pub.table)), pub.run["seeds"]
    checked = rival_claims(results, variants)
    rows, board = leaderboard(results, variants)
    differences = [k for r in rows for k in r.against.values()]
    decided = Counter(k.verdict for k in differences)
    head = (f"Seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}), run {pub.run['date']} at "
            f"{pub.run['commit']} on {pub.run['cpu']}: the rivals' claims **"
            f"{counts([c.verdict for c in checked])}** (of {len(checked)}; uncorrected: "
            f"{counts([c.uncorrected for c in checked])}); the leaderboard: "
            f"{decided['holds']} differences better, {decided['contradicted']} worse, "
            f"{len(differences) - decided['holds'] - decided['contradicted']} not separated "
            f"(of {len(differences)}).")  # fmt: skip
    if short:
        return head + " " + "; ".join(f"{c.key}: {c.verdict}" for c in checked) + "."
    judge = lambda r: rival_claims(r, variants)  # noqa: E731
    failed, without = without_failed(results, variants, skill_floor(pub), judge)
    per_seed = [[letter(v), metric, *(_value(pub, v, metric, s) for s in seeds)]
                for metric in RIVAL_MEASURES for v in variants
                if metric in pub.table[v]]  # fmt: skip
    return "\n".join([
        head, "", *md_table(CLAIM_COLUMNS, claim_rows(checked)), "",
        skill_line(failed, without, skill_floor(pub)), "", RIVALS_NOTE, "",
        BOARD_NOTE, "", board_line(board), "", *md_table(BOARD_COLUMNS, board_rows(rows)), "",
        "Every seed's value:", "",
        *md_table(["law", "measure", *(f"seed {s}" for s in seeds)], per_seed),
    ])  # fmt: skip


def _value(pub: Published, variant: str, metric: str, seed: int) -> str:
    value = pub.table[variant][metric].get(seed)
    return "-" if value is None else pub.fmt(metric, value)


def design_criteria(path: Path) -> str:
    """A run's design criteria (preset.design, verdicts.design) on its design seeds."""
    if not path.is_file():
        return not_in_yet(path, "the design run of docs/rival-laws.md")
    pub = load(path)
    design = Design(**{k: tuple(v) if k == "seeds" else v for k, v in pub.run["design"].items()})
    rows = design_rows(pub.results(), design, ordered(list(pub.table)))
    seeds = pub.run["seeds"]
    head = (f"Seeds {', '.join(map(str, seeds))}, run {pub.run['date']} at {pub.run['commit']} on "
            f"{pub.run['cpu']}:")  # fmt: skip
    return "\n".join([head, "", *md_table(DESIGN_COLUMNS, rows)])


def rivals_file(results: Path, design: bool) -> dict:
    """The rival laws' file (issue 43) from a run's results.json: its verdict seeds (those
    outside preset.design) or, design True, its design seeds; one line where it has none."""
    seeds = sorted({s for ms in read_judgeable(results).values() for by in ms.values() for s in by})
    chosen = set(report_node(results)[0].preset.design.seeds)
    keep = [s for s in seeds if (s in chosen) == design]
    if not keep:
        kind = "design" if design else "verdict (outside preset.design.seeds)"
        raise SystemExit(f"{results} has no {kind} seed: it has {seeds}")
    if not design and keep != RIVAL_SEEDS:
        raise SystemExit(f"{results} has the verdict seeds {keep}; docs/rival-laws.md fixed "
                         f"{RIVAL_SEEDS[0]}-{RIVAL_SEEDS[-1]} before they ran")  # fmt: skip
    about = ("The rival laws' design seeds (preset.design): their design criteria, no verdict "
             "(issue 43, docs/rival-laws.md)" if design else
             "The rival laws' verdict run (issue 43): its claims and leaderboard are computed "
             "from these values by report.published (docs/rival-laws.md wrote the rule and "
             "seeds down before it ran)")  # fmt: skip
    return run_file(results, keep, about)


def rival_blocks() -> dict[str, str]:
    """The rival laws' generated blocks, by name."""
    return {"rival-laws": rival_laws(RIVALS, False), "rival-laws-short": rival_laws(RIVALS, True),
            "rival-design-cpu": design_criteria(RIVALS_DESIGN)}  # fmt: skip
