"""The published verdict run as data (docs/results/verdict_seeds3-10.json) and the pages made
from it: docs/results.md's per-seed tables and its verdicts on seeds 3-12, the README's headline
lines, and the 8-seed verdict tables beside the rule before issue 42 (docs/history.md, 2026-11-27).

`python -m ssmax.report.published` (its __main__) writes them.

The extension (issue 42 item 4): fresh seeds added after the first eight were seen, to reach
the seed count fixed for the primary claims. Its verdicts are computed on the published seeds
and its own together, only for the metrics the published file holds, and shown beside the
8-seed ones, never instead of them.

The file holds the run's per-seed values of every claim metric the page publishes, shaped as
the report's results.json (variant -> metric -> seed -> value), the metrics it lacks and why,
and the verdicts published under the rule until issue 42. The claims read it directly
(gather.Results.table); their verdict table is computed here, never typed. A generated block
lies between `<!-- published:NAME ... -->` and `<!-- /published:NAME -->`. The rival laws'
files and blocks (issue 43): report.published.rivals; the files' shape: verdicts.published_file;
the leaderboard of every law and its figure of NIAH by context (issue 60, docs/figures/):
report.published.board and report.published.board_figure, whose figure `--check` holds to its
numbers too.
"""

from __future__ import annotations

import math
from pathlib import Path

from ssmax.config.variants import ordered
from ssmax.report.headline import headline
from ssmax.report.published.board import board_block
from ssmax.report.published.rivals import rival_blocks
from ssmax.verdicts.claims import Claim, claims
from ssmax.verdicts.design import without_failed
from ssmax.verdicts.metrics import table_names
from ssmax.verdicts.multiplicity import UNDECIDABLE
from ssmax.verdicts.published_file import (
    EXTENSION,
    ROOT,
    Published,
    counts,
    extended,
    letter,
    load,
    run_file,
    skill_floor,
    skill_line,
)
from ssmax.verdicts.replicate import compare, read_judgeable
from ssmax.verdicts.replicate import table as again_table
from ssmax.verdicts.text import family_text, md_table, ordering_text, seeds_text

# the 8-seed tables (verdicts, verdicts-short) beside the rule before issue 42: history
PAGES = {"seed-tables": "docs/results.md", "verdicts": "docs/history.md",
         "verdicts-short": "docs/history.md", "replication-gpu": "docs/results.md",
         "replication-cpu": "docs/results.md", "verdicts-extended": "docs/results.md",
         "rival-laws": "docs/results.md", "rival-laws-short": "README.md",
         "rival-design-cpu": "docs/rival-laws.md", "headline": "README.md",
         "leaderboard": "docs/results.md"}  # fmt: skip
# other runs of some of the published chains, each a generated block (verdicts.replicate)
REPLICATIONS = {
    "replication-gpu": ROOT / "docs/results/gpu_replication_2026-11-27.json",
    "replication-cpu": ROOT / "docs/results/cpu_rerun_2026-11-27.json",
}
# the per-seed tables of docs/results.md, in its order: (metric, heading)
SEED_TABLES = [
    ("pretrain val loss", "**Pretraining validation loss**"),
    ("loss @20x", "**Loss at 20x, theta x50**"),
    ("loss @5x", "**Loss at 5x, theta x50**"),
    ("niah @1x", "**NIAH at 1x, theta x50** (20 prompts a seed: 5 depths x 4)"),
    ("niah past 1x", "**NIAH past 1x, theta x50** (mean of 2x-20x: the retrieval claims' metric)"),
    ("needle top mean", "**Top needle score, mean of 20 trials** (Fig. 8)"),
]


def seed_tables(pub: Published) -> str:
    """docs/results.md's per-seed tables: one per published metric, a row per variant."""
    seeds, out = pub.run["seeds"], []
    for metric, heading in SEED_TABLES:
        variants = [v for v in ordered(list(pub.table)) if metric in pub.table[v]]
        rows = [[letter(v), *(_cell(pub, v, metric, s) for s in seeds)]
                for v in variants]  # fmt: skip
        out += [heading, "", *md_table(["variant", *(f"seed {s}" for s in seeds)], rows), ""]
    if "p_n log fit R²" in pub.table.get("pn_rationale", {}):
        out.append("**p_n's fit (R²)**: " + ", ".join(
            f"{'seed ' if i == 0 else ''}{s} {_cell(pub, 'pn_rationale', 'p_n log fit R²', s)}"
            for i, s in enumerate(seeds)) + ".")  # fmt: skip
        out.append("")
    out += [f"Not in the file: {', '.join(pub.absent)} ({_reasons(pub)})."] if pub.absent else []
    return "\n".join(out).rstrip("\n")


def _cell(pub: Published, variant: str, metric: str, seed: int) -> str:
    """A published value as published, '-' where the file has none."""
    value = pub.table[variant][metric].get(seed)
    return "-" if value is None else pub.fmt(metric, value)


def _reasons(pub: Published) -> str:
    return "; ".join(dict.fromkeys(pub.absent.values()))


def why_differs(c: Claim, old: str, pub: Published) -> str:
    """Where the rule's verdict is not the one published under the old rule: why."""
    if c.verdict == old:
        return ""
    if c.verdict == "n/a":
        metrics = {k.ordering.split(" on ")[-1] for k in c.checks}
        gone = sorted({n for m in metrics for n in _names(m)} & set(pub.absent))
        return f"n/a: {', '.join(gone)} not in the file, which the old verdict had"
    moved = [k for k in c.checks if k.uncorrected in ("holds", "contradicted")
             and k.verdict != k.uncorrected]  # fmt: skip
    how = "Holm" if c.family == "primary" else "Benjamini-Hochberg"
    floor = (f"{c.shown}: below the permutation floor of {c.floor} seeds"
             + ("; " if moved else "")) if c.verdict == UNDECIDABLE else ""  # fmt: skip
    return (
        floor
        + "; ".join(
            f"{k.ordering}: {k.uncorrected} uncorrected; p t {_p(k.p_t)} -> {_p(k.adj_t)}, "
            f"permutation {_p(k.p_perm)} -> {_p(k.adj_perm)}" + (f" ({k.note})" if k.note else "")
            for k in moved
        )
        + f" ({how}, m = {c.m})"
    )


def _names(metric: str) -> tuple[str, ...]:
    try:
        return table_names(metric)
    except ValueError:  # the p_n claim's label names no metric
        return ()


def _p(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2g}"


def verdicts(checked: list[Claim], pub: Published, short: bool) -> str:
    """The verdict table under the rule of issue 42 beside the published old verdicts."""
    old = [pub.old_rule.get(c.key, "-") for c in checked]
    head = (f"Rule of issue 42 on this file: **{counts([c.verdict for c in checked])}** (of "
            f"{len(checked)}); the old rule as published on {pub.run['date']}: "
            f"{counts(old)}; the old rule on this file: "
            f"{counts([c.uncorrected for c in checked])}.")  # fmt: skip
    if short:
        columns = ["claim (paper)", "family", "rule of issue 42", "old rule (published)",
                   "why they differ"]  # fmt: skip
        rows = [[c.text, c.family, f"**{c.shown}**", o, why_differs(c, o, pub) or "-"]
                for c, o in zip(checked, old, strict=True)]  # fmt: skip
    else:
        columns = ["claim (paper)", "family", "rule of issue 42", "old rule (published)",
                   "orderings: difference, tests, uncorrected verdict, seeds to decide, "
                   "leave-one-out, outlying seeds, repeats (model)",
                   "seeds to decide (t at 0.05 / m; permutation floor)"]  # fmt: skip
        rows = [[c.text, family_text(c), f"**{c.shown}**", o,
                 " · ".join(ordering_text(k) for k in c.checks) or c.value,
                 f"{seeds_text(c.seeds_needed)}; {c.floor}"]
                for c, o in zip(checked, old, strict=True)]  # fmt: skip
    if short:
        return "\n".join([head, "", *md_table(columns, rows)])
    floor = skill_floor(pub)
    failed, without = without_failed(pub.results(), list(pub.table), floor, claims)
    return "\n".join([head, "", *md_table(columns, rows), "", skill_line(failed, without, floor)])


def blocks(pub: Published) -> dict[str, str]:
    """Each generated block's text, by name."""
    checked = claims(pub.results())
    made = {"seed-tables": seed_tables(pub), "verdicts": verdicts(checked, pub, short=False),
            "verdicts-short": verdicts(checked, pub, short=True)}  # fmt: skip
    for name, path in REPLICATIONS.items():
        made[name] = replication(pub, path)
    made["verdicts-extended"] = extended_verdicts(pub, checked, EXTENSION)
    made["headline"] = headline(extended(pub, load(EXTENSION)),
                                read_judgeable(REPLICATIONS["replication-gpu"]))  # fmt: skip
    return made | rival_blocks() | {"leaderboard": board_block()}


def extended_verdicts(pub: Published, checked: list[Claim], path: Path) -> str:
    """The verdicts on the published seeds and the extension's, beside the 8-seed ones."""
    if not path.is_file():
        return f"Not in yet: {path.relative_to(ROOT)} (python -m ssmax.report.published --extend)."
    ext = load(path)
    both = extended(pub, ext)
    wider = claims(both.results())
    seeds = both.run["seeds"]
    head = (f"Seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}; {', '.join(map(str, ext.run['seeds']))} "
            f"added after the first {len(pub.run['seeds'])} were seen, run {ext.run['date']} at "
            f"{ext.run['commit']}): **{counts([c.verdict for c in wider])}** (of {len(wider)}); "
            f"uncorrected: {counts([c.uncorrected for c in wider])}.")  # fmt: skip
    columns = ["claim (paper)", "family", f"{len(pub.run['seeds'])} seeds", f"{len(seeds)} seeds",
               f"{len(seeds)} seeds, uncorrected", "orderings"]  # fmt: skip
    rows = [[c.text, family_text(w), c.shown, f"**{w.shown}**", w.uncorrected,
             " · ".join(ordering_text(k) for k in w.checks) or w.value]
            for c, w in zip(checked, wider, strict=True)]  # fmt: skip
    seeds_rows = [[letter(v), metric, *(_cell(ext, v, metric, s) for s in ext.run["seeds"])]
                  for metric, _ in SEED_TABLES for v in ordered(list(ext.table))
                  if metric in ext.table[v]]  # fmt: skip
    failed, without = without_failed(both.results(), list(both.table), skill_floor(pub), claims)
    added = ["", skill_line(failed, without, skill_floor(pub)), "",
             "The added seeds' values (every one; the file holds more metrics):", "",
             *md_table(["variant", "metric", *(f"seed {s}" for s in ext.run["seeds"])],
                        seeds_rows)]  # fmt: skip
    return "\n".join([head, "", *md_table(columns, rows), *added])


def extension_from(results: Path, pub: Published) -> dict:
    """The extension file's content: the seeds of a run's results.json that the published
    file lacks."""
    table = read_judgeable(results)
    added = sorted({s for ms in table.values() for by_seed in ms.values() for s in by_seed}
                   - set(pub.run["seeds"]))  # fmt: skip
    if not added:
        raise SystemExit(f"{results} has no seed that the published file lacks")
    about = (
        "Seeds added to the published verdict run after its first eight were seen "
        "(issue 42 item 4), for the variants the primary claims compare; another venv and "
        "CPU than the published seeds' (other low bits). Shaped as the published file."
    )
    return run_file(results, added, about)


def replication(pub: Published, path: Path) -> str:
    """Another run of some chains, judged on its own pairs beside this file."""
    return again_table(compare(pub.results(), read_judgeable(path)))


def replace_block(text: str, name: str, body: str) -> str:
    """text with the block `name` holding body (its opening marker line kept)."""
    if f"<!-- published:{name} " not in text or f"<!-- /published:{name} -->" not in text:
        raise SystemExit(f"no block {name!r} (<!-- published:{name} ... --> to "
                         f"<!-- /published:{name} -->) in {PAGES[name]}")  # fmt: skip
    start = text.index(f"<!-- published:{name} ")
    start = text.index("\n", start) + 1
    end = text.index(f"<!-- /published:{name} -->")
    return text[:start] + body + "\n" + text[end:]
