"""A verdict in words, as every page shows it (the run's report, docs/results.md, the
registrations' pages): the rule, a claim's row and its orderings, a family, the leaderboard's
cells, and the markdown table they stand in. Plain text; nothing here decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ssmax.config.variants import facts
from ssmax.verdicts.claims import Checked, Claim
from ssmax.verdicts.multiplicity import CORRECTION_NAMES, CORRECTIONS
from ssmax.verdicts.rivals import Row

RULE = (
    "How a claim is decided (issue 42's rule, with the states and intervals registered on "
    "2026-11-29; ssmax.verdicts.claims): "
    "each ordering the paper states is tested on the per-seed differences between the two "
    "variants, paired by seed (same seed, same data order), by two two-sided tests: the paired "
    "t-test and the exact sign-flip permutation test (all 2^n flips). Their p-values are "
    "corrected within the claim's family: primary (the abstract's headline results) by Holm, "
    "secondary (every other claim) by Benjamini-Hochberg. Both corrected p below 0.05 with the "
    "mean on the paper's side: holds; on the other side: contradicted; else, with fewer seeds "
    "than the family's permutation floor (the fewest n with 2 / 2^n <= 0.05 / m): not "
    "decidable at n seeds; else inconclusive (either undecided one says 't and permutation "
    "disagree' where only one corrected p is below 0.05); n/a where a value is missing. A "
    "claim is contradicted when any ordering is (whatever else is missing), holds when all "
    "hold, else n/a when any is, else not decidable when any is, else inconclusive. The "
    "interval beside each ordering is the 95% t-interval of the mean difference. Information "
    "beside it, not part of the verdict: the uncorrected verdict (the 95% t-interval wholly on "
    "one side of 0, the rule until issue 42); leave-one-out ('flips without seed s': the "
    "decision, holds, contradicted or undecided, changes with that seed left out of every "
    "ordering); outlying "
    "seeds (robust z of the difference beyond 3.5); seeds to decide: how many paired seeds "
    "give the t-test power 0.8 at the family's 0.05 / m if the observed effects and spreads "
    "were the truth (none: an effect of 0), beside the permutation floor, the fewest seeds "
    "with which the permutation test can reach 0.05 / m at all; and the approximate chance "
    "that an independent experiment with as many seeds repeats the uncorrected verdict (a "
    "model, nothing measured; a claim: its least sure ordering's if it holds, its surest "
    "contradicted one's if contradicted)."
)
CLAIM_COLUMNS = ["claim (paper)", "family", "ours: mean ± sd per variant",
                 "orderings: high - low, mean [95% t-interval] (seeds); "
                 "p t and permutation, raw -> corrected", "verdict",
                 "uncorrected (95% t-interval)",
                 "seeds to decide (t: power 0.8 at 0.05 / m; permutation: its floor)",
                 "independent experiment repeats the uncorrected verdict (model)"]  # fmt: skip


def md_table(columns: list[str], body: list[list[str]]) -> list[str]:
    def cell(s: str) -> str:
        return str(s).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, columns)) + " |", "|---" * len(columns) + "|"]
    return lines + ["| " + " | ".join(map(cell, row)) + " |" for row in body]


def untested_line(untested: Sequence[Claim], variants: Sequence[str]) -> str:
    """One sentence on the claims this pipeline cannot test: which variants they need."""
    if not untested:
        return ""
    ran = {facts(v).letter for v in variants}
    needed = sorted({x for c in untested for x in c.letters} - ran)
    return (f"Not tested here: {len(untested)} claim(s) of the paper need variants this "
            f"pipeline does not run ({', '.join(f'({x})' for x in needed)}); "
            "`PIPELINE=paper` runs them all.")  # fmt: skip


def seeds_text(n: float) -> str:
    """A seed count for the table: '-' when unknown (< 2 seeds), 'none' for no effect."""
    if math.isnan(n):
        return "-"
    return "none" if math.isinf(n) else str(int(n))


def rerun_text(c: Claim) -> str:
    """The model's chance for the claim's uncorrected verdict, '0.83', or '-'."""
    return "-" if math.isnan(c.rerun_keeps) else f"{c.rerun_keeps:.2f}"


def _p(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2g}"


def ordering_text(k: Checked) -> str:
    """One ordering in the claims table: its numbers, tests, verdicts and what it hangs on."""
    parts = [f"{k.ordering}: {k.difference}"]
    if not math.isnan(k.p_t):
        parts.append(f"p t {_p(k.p_t)} -> {_p(k.adj_t)}, permutation {_p(k.p_perm)} -> "
                     f"{_p(k.adj_perm)}")  # fmt: skip
    parts.append(k.shown + (f" ({k.note})" if k.note else ""))
    parts.append(f"uncorrected {k.uncorrected}")
    parts.append(f"decided by {seeds_text(k.seeds_needed)}")
    if k.flips:
        parts.append(f"flips without seed {', '.join(map(str, k.flips))}")
    if k.outliers:
        parts.append(f"outlying seed {', '.join(map(str, k.outliers))}")
    if not math.isnan(k.rerun_keeps):
        parts.append(f"repeats (model) {k.rerun_keeps:.2f}")
    return "; ".join(parts)


def family_text(c: Claim) -> str:
    """'primary (Holm, m = 13; permutation floor 10 seeds)'."""
    if not c.family:
        return "-"
    how = CORRECTION_NAMES[CORRECTIONS[c.family]]
    if not c.m and c.orderings:  # one seed: the family its orderings make once each is tested
        return (f"{c.family} ({how}, m = 0: no ordering has 2 seeds; m = {c.orderings} once "
                f"each has: permutation floor {c.floor} seeds)")  # fmt: skip
    return f"{c.family} ({how}, m = {c.m}; permutation floor {c.floor} seeds)"


SHORT = {  # what each primary claim says, in a few words (its full text: verdicts.claims)
    "pretrain_lower": "(b), (c), (d) reach a lower pretraining loss than (a) (Sec. 3.1)",
    "long_loss_bc": "(b) and (c) keep a lower loss than (a) past N, theta x50 (Sec. 3.2)",
    "niah_b_above_a": "(b) retrieves better than (a) past N (NIAH, Sec. 3.3)",
    "needle_b_above_a": "(b)'s top needle score is above (a)'s (Sec. 3.4)",
    "niah_ef_between": "(e) and (f) retrieve better than (a) but worse than (b) (Sec. 3.3)",
}


def primary_parts(checked: list[Claim]) -> tuple[str, list[str], str]:
    """The paper's primary claims for the console at a run's end and the report's first
    section: the line that says the seeds, a verdict a claim (SHORT), and where the run has
    fewer seeds than the family's permutation floor, that no gap decides ("": none; all "" and
    no claims where the run has no primary claim)."""
    primary = [c for c in checked if c.family == "primary"]
    if not primary:
        return "", [], ""
    n = max((k.n for c in primary for k in c.checks), default=0)
    note = (f"(the rule decides none below {primary[0].floor} seeds, however large a gap: "
            "`make plan SEEDS=...` says what more seeds take here)") if n < primary[0].floor \
        else ""  # fmt: skip
    return (f"the paper's primary claims, {n} seed{'s' * (n != 1)}:",
            [f"{SHORT.get(c.key, c.text)}: {c.shown}" for c in primary], note)  # fmt: skip


def primary_lines(checked: list[Claim]) -> list[str]:
    """primary_parts as the console's lines, a claim a `- ` item."""
    said, claims, note = primary_parts(checked)
    return [said, *(f"- {c}" for c in claims), *([note] if note else [])] if said else []


def claim_rows(claims: list[Claim]) -> list[list[str]]:
    return [[c.text, family_text(c), c.value,
             " · ".join(ordering_text(k) for k in c.checks) or "-", c.shown.upper(),
             c.uncorrected or "-", f"{seeds_text(c.seeds_needed)} (permutation: {c.floor})",
             rerun_text(c)]
            for c in claims]  # fmt: skip


RIVALS_NOTE = (
    "Rows of the family rivals are claims of the rival laws' papers, not of the SSMax paper "
    "(docs/rival-laws.md wrote them down before any verdict seed of those laws ran): their own "
    "family, corrected by Holm, judged by the same rule."
)
BOARD_NOTE = (
    "Every law this run holds besides (a) and (b), on each headline measure: its mean and 95% "
    "t-interval over seeds, and its paired difference to (a) and to (b) (mean [95% t-interval] "
    "(seeds)), oriented so that positive is the law's better side (lower loss, higher NIAH "
    "accuracy and needle score). Each difference is an ordering of the family leaderboard, "
    "corrected by Benjamini-Hochberg and decided by the claims' rule: better or worse where "
    "both corrected p are below 0.05, else not separated, with the seeds that would decide it "
    "(t: power 0.8 at 0.05 / m)."
)
BOARD_COLUMNS = ["law", "measure", "mean [95% t-interval] (seeds)",
                 "against (a): difference; corrected p t, permutation; verdict",
                 "against (b): difference; corrected p t, permutation; verdict"]  # fmt: skip
BOARD_VERDICTS = {"holds": "BETTER", "contradicted": "WORSE", "n/a": "n/a"}


def board_cell(k: Checked) -> str:
    """A law's difference to (a) or (b) in the leaderboard, decided or the seeds it takes."""
    parts = [k.difference]
    if not math.isnan(k.p_t):  # tested (2 or more seeds)
        parts.append(f"p {_p(k.adj_t)}, {_p(k.adj_perm)}")
    verdict = BOARD_VERDICTS.get(k.verdict)
    if verdict is None:
        n = seeds_text(k.seeds_needed)
        verdict = "not separated" + (f" ({k.shown})" if k.verdict != "inconclusive" else "")
        verdict += ", " + (
            "no count of seeds decides an effect this small"
            if n == "none"
            else f"decided by {n} seeds"
        )
        verdict += f" ({k.note})" if k.note else ""
    parts.append(verdict)
    if k.flips:
        parts.append(f"flips without seed {', '.join(map(str, k.flips))}")
    return "; ".join(parts)


def board_rows(rows: Sequence[Row]) -> list[list[str]]:
    return [[f"({r.law})", r.measure, r.own, board_cell(r.against["a"]),
             board_cell(r.against["b"])] for r in rows]  # fmt: skip


def board_line(board: Claim | None) -> str:
    return f"Family: {family_text(board)}." if board else ""
