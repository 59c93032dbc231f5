"""The claims' rule across orderings (verdicts.claims' docstring): each family's two p-values per
ordering, corrected within the family, the verdict where the t-test and the permutation test agree,
"not decidable" below the family's permutation floor, and leave-one-out. Plain data in and out:
nothing here knows a claim, a variant or a metric; an ordering is its label and its paired
differences, seed -> d.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ssmax.verdicts.stats import (
    ALPHA,
    benjamini_hochberg,
    holm,
    p_permutation,
    p_t,
    permutation_floor,
)

Differences = dict[int, float]  # seed -> paired difference (positive: the paper's side)
Families = dict[str, dict[str, Differences]]  # family -> ordering label -> differences
CORRECTIONS: dict[str, Callable[[Sequence[float]], list[float]]] = {
    "primary": holm,  # family-wise error
    "secondary": benjamini_hochberg,  # false discovery rate
    "rivals": holm,  # the rival laws' papers' headline claims (docs/rival-laws.md)
    "leaderboard": benjamini_hochberg,  # every law against (a) and (b) (verdicts.rivals)
}
CORRECTION_NAMES = {holm: "Holm", benjamini_hochberg: "Benjamini-Hochberg"}
DISAGREE = "t and permutation disagree"
UNDECIDABLE = "not decidable"  # at n seeds: n below the family's permutation floor
DECIDED = ("holds", "contradicted")


@dataclass
class Tested:
    """One ordering of a family: its raw and corrected p-values and the rule's verdict."""

    p_t: float
    p_perm: float
    adj_t: float
    adj_perm: float
    verdict: str  # holds / contradicted / not decidable / inconclusive
    note: str = ""  # DISAGREE where one corrected p is below ALPHA and the other is not
    flips: list[int] = field(default_factory=list)  # seeds whose absence changes the verdict


def verdict_of(mean: float, adj_t: float, adj_perm: float, n: int = 0, floor: int = 0
               ) -> tuple[str, str]:  # fmt: skip
    """(verdict, note) of one ordering from its corrected p-values, the sign of its mean, its
    seeds n and its family's permutation floor: decided where both tests are below ALPHA; else
    not decidable below the floor (the permutation test cannot reach the family's 0.05 / m
    there), else inconclusive."""
    by_t, by_perm = adj_t < ALPHA, adj_perm < ALPHA
    if by_t and by_perm:
        return ("holds" if mean > 0 else "contradicted"), ""
    note = DISAGREE if by_t != by_perm else ""
    return (UNDECIDABLE if n < floor else "inconclusive"), note


def floor_of(m: int) -> int:
    """A family of m tested orderings: the fewest seeds whose permutation test can reach its
    0.05 / m (Holm's first step; Benjamini-Hochberg's strictest level)."""
    return permutation_floor(ALPHA / max(m, 1))


def decision(verdict: str) -> str:
    """holds / contradicted, or "undecided" for every other verdict (what leave-one-out
    compares: a seed's absence that leaves an undecided ordering undecided flips nothing)."""
    return verdict if verdict in DECIDED else "undecided"


def judge(families: Families) -> dict[str, dict[str, Tested]]:
    """family -> label -> Tested, for the orderings with 2 or more seeds (the family's m
    hypotheses; the others have no test and are not counted)."""
    out: dict[str, dict[str, Tested]] = {}
    for family, orderings in families.items():
        tested = {k: list(d.values()) for k, d in orderings.items() if len(d) >= 2}
        labels = list(tested)
        raw_t = [p_t(tested[k]) for k in labels]
        raw_perm = [p_permutation(tested[k]) for k in labels]
        correct = CORRECTIONS[family]
        adj_t, adj_perm = correct(raw_t), correct(raw_perm)
        floor = floor_of(len(labels))
        out[family] = {
            k: Tested(raw_t[i], raw_perm[i], adj_t[i], adj_perm[i],
                      *verdict_of(statistics.fmean(tested[k]), adj_t[i], adj_perm[i],
                                  len(tested[k]), floor))
            for i, k in enumerate(labels)
        }  # fmt: skip
    return out


def without(families: Families, seed: int) -> Families:
    """The same families with one seed left out of every ordering: the experiment without it."""
    return {f: {k: {s: d for s, d in diffs.items() if s != seed} for k, diffs in fam.items()}
            for f, fam in families.items()}  # fmt: skip


def rule(families: Families, flips: bool = True) -> dict[str, dict[str, Tested]]:
    """judge(families), each verdict marked with the seeds whose absence alone changes its
    decision (holds, contradicted or undecided: inconclusive and not decidable are both
    undecided, and an ordering left with < 2 seeds is undecided). flips=False: none marked,
    for a caller that shows only the verdicts (leave-one-out is a judgement a seed)."""
    full = judge(families)
    seeds = sorted({s for fam in families.values() for d in fam.values() for s in d})
    if not flips:
        return full
    for seed in seeds:
        left = judge(without(families, seed))
        for family, tested in full.items():
            for label, t in tested.items():
                other = left[family].get(label)
                if decision(other.verdict if other else UNDECIDABLE) != decision(t.verdict):
                    t.flips.append(seed)
    return full
