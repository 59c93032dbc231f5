"""The paper's claims, each decided on per-seed values paired by seed.

The rule of issue 42 (2026-11-27, stated before any verdict was computed under it), with the
verdict states and intervals as registered on 2026-11-29 for the confirmatory run
(docs/registration/confirmatory-2026-11-29.md, "The rule"; when: docs/results.md, "How a
verdict is decided"); never tune it, the families or the claims towards a verdict:

- A claim is a list of orderings "x below y on metric m" (lower loss; or, where the paper
  says y is above x, a lower accuracy or needle score for x).
- One ordering: d_s = m(y, s) - m(x, s) for every seed s that both variants have (the same
  seed is the same data order: the values are paired). Positive d supports the paper. The
  one-sample claim (p_n's log law): d_s = R²_s - R2_LOG_LAW.
- Two families, chosen from the paper's abstract and figures (never from which claims hold
  here). PRIMARY (PRIMARY below), the abstract's headline results: pretrain_lower (Sec. 3.1,
  Fig. 4: "faster loss reduction during pretraining"), long_loss_bc (Sec. 3.2, Fig. 5:
  "significantly lower loss values even as the context size increased"), niah_b_above_a
  (Sec. 3.3, Fig. 6), needle_b_above_a (Sec. 3.4, Fig. 8: "allocate significantly more
  attention to key tokens") and niah_ef_between (Sec. 3.3: replacing Softmax "can still
  provide some degree of improvement", SSMax "from the beginning achieve[s] superior length
  generalization"). SECONDARY: every other claim. A family's hypotheses are the distinct
  orderings of its claims that have 2 or more paired seeds (m of them); an ordering that
  claims of both families state is tested in each.
- Each ordering gets two two-sided p-values: the paired t-test (scipy.stats.ttest_1samp on
  d) and the exact sign-flip permutation test of the mean of d (scipy.stats.permutation_test:
  all 2^n sign flips while n <= 16, past that 99,999 random ones from seed 0). Each is
  corrected within the family: primary by Holm's step-down (family-wise error 0.05),
  secondary by Benjamini-Hochberg (scipy.stats.false_discovery_control; false discovery
  rate 0.05).
- An ordering (its n paired seeds): n/a when a variant or a value is missing (no paired
  seed); holds when both corrected p-values are below 0.05 and the mean of d is above 0,
  contradicted when both are and the mean is below 0; else "not decidable at n seeds" when n
  is below the family's permutation floor (the fewest n with 2 / 2^n <= 0.05 / m: below it
  the permutation test cannot reach the family's strictest level; 1 seed is below every
  floor); else inconclusive, said with its effect and 95% t-interval. Where only one corrected
  p is below 0.05 the undecided verdict says "t and permutation disagree". (A decided
  verdict stands below the floor: Benjamini-Hochberg's levels above 0.05 / m can be reached
  there.)
- A claim is contradicted when any ordering is, whatever else is missing; else holds when
  every ordering holds; else n/a when any ordering is; else not decidable (at the fewest seeds
  of its not-decidable orderings) when any is; else inconclusive.
- The interval beside every ordering is the 95% Student-t interval of the mean of d (exact
  coverage under normal differences at any n). The 95% percentile bootstrap is not printed:
  at 8 seeds it covers ~88% (tests/test_stats.py measures both).
- Beside each verdict, information only, never part of it:
  - the uncorrected verdict, the rule until issue 42: the 95% Student-t interval of the mean
    of d (ssmax.verdicts.stats) above 0 holds, below 0 contradicted, else inconclusive;
  - leave-one-out: each ordering's decision (holds, contradicted, or undecided: inconclusive
    and not decidable alike) by this rule with one seed left out of every ordering of both
    families (the same experiment without that seed); a decision that one seed's absence
    changes says "flips without seed s";
  - outlying seeds: the robust z of each d, 0.6745 (d - median) / MAD, beyond 3.5 in size
    (Iglewicz and Hoaglin; MAD 0: every d off the median);
  - seeds to decide: the paired seeds with which the two-sided paired t-test at level
    0.05 / m reaches power 0.8 if the observed effect and spread were the truth (Holm's first
    step, its strictest level; Benjamini-Hochberg's level 0.05 rank / m depends on the data,
    so 0.05 / m is taken there too, the strictest); and the permutation floor, the fewest
    seeds n with 2 / 2^n <= 0.05 / m: below it the permutation test decides nothing in the
    family;
  - the approximate chance that an independent experiment with as many seeds repeats the
    uncorrected verdict (a model: stats.Interval.rerun_keeps), nothing measured.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ssmax.config.variants import by_letter, facts, learns_p_n, names
from ssmax.verdicts.metrics import absent_reason, values_of
from ssmax.verdicts.multiplicity import UNDECIDABLE, Tested, floor_of, rule
from ssmax.verdicts.pn_fit import pn_fits
from ssmax.verdicts.results import Results
from ssmax.verdicts.stats import ALPHA, OUTLIER_Z, Interval, robust_z

R2_LOG_LAW = 0.9  # "p_n closely follows a log law"
VERDICTS = ("holds", "contradicted", UNDECIDABLE, "inconclusive", "n/a")
# the abstract's headline results (module docstring); every other claim is secondary
PRIMARY = ("pretrain_lower", "long_loss_bc", "niah_b_above_a", "needle_b_above_a",
           "niah_ef_between")  # fmt: skip


@dataclass(frozen=True)
class Ordering:
    """The paper says: metric of variant ``low`` is below that of variant ``high``."""

    metric: str
    low: str  # variant letter
    high: str

    def label(self) -> str:
        return f"{self.low} < {self.high} on {self.metric}"


@dataclass
class Checked:
    """One ordering, decided by the rule (verdict) with the information beside it."""

    ordering: str
    difference: str  # high - low: mean [95% t-interval] (n)
    verdict: str  # the rule's: both corrected p-values agree (module docstring)
    seeds_needed: float = math.nan  # paired seeds for power 0.8 at the family's 0.05 / m
    rerun_keeps: float = math.nan  # model: an independent experiment repeats `uncorrected`
    uncorrected: str = ""  # the 95% t-interval's verdict (the rule until issue 42)
    # seed -> paired difference high - low (one-sample: value - threshold); what is tested
    differences: dict[int, float] = field(default_factory=dict)
    threshold: float = 0.0  # added back to show an interval on the value's own scale
    p_t: float = math.nan  # two-sided, raw and corrected within the family
    p_perm: float = math.nan
    adj_t: float = math.nan
    adj_perm: float = math.nan
    note: str = ""  # "t and permutation disagree"
    flips: list[int] = field(default_factory=list)  # seeds whose absence alone flips verdict
    outliers: list[int] = field(default_factory=list)  # seeds with a robust |z| > 3.5

    @property
    def n(self) -> int:
        """Its paired seeds."""
        return len(self.differences)

    @property
    def shown(self) -> str:
        """The verdict as the tables say it: 'not decidable at 8 seeds', else the verdict."""
        return f"{UNDECIDABLE} at {self.n} seed{'s' * (self.n != 1)}" if (
            self.verdict == UNDECIDABLE) else self.verdict  # fmt: skip

    def apply(self, tested: Tested | None, level: float) -> None:
        """The family's judgement of this ordering (None: < 2 seeds, no test: not decidable
        with 1 seed, n/a with none) and what is computed from its own differences at the
        family's level 0.05 / m."""
        values = list(self.differences.values())
        if tested is not None:
            self.p_t, self.p_perm, self.adj_t, self.adj_perm = (
                tested.p_t, tested.p_perm, tested.adj_t, tested.adj_perm)  # fmt: skip
            self.verdict, self.note, self.flips = tested.verdict, tested.note, tested.flips
        else:
            self.verdict = UNDECIDABLE if values else "n/a"
        self.seeds_needed = Interval.of(values).seeds_needed(alpha=level)
        z = robust_z(values) if len(values) >= 2 else [0.0] * len(values)
        self.outliers = [s for s, x in zip(self.differences, z, strict=True) if abs(x) > OUTLIER_Z]


@dataclass
class Claim:
    key: str
    text: str  # what the paper says, and where
    value: str  # our numbers per variant: mean ± std over seeds
    verdict: str  # the rule's: holds / contradicted / not decidable / inconclusive / n/a
    checks: list[Checked] = field(default_factory=list)
    letters: tuple[str, ...] = ()  # the variants it compares, by letter
    uncorrected: str = ""  # the same aggregation of the orderings' uncorrected verdicts
    family: str = ""  # primary (Holm) / secondary (Benjamini-Hochberg)
    m: int = 0  # the family's tested orderings
    orderings: int = 0  # the family's orderings with a value, tested or not (< 2 seeds)
    floor: int = 0  # the fewest seeds whose permutation test can reach the family's 0.05 / m

    @property
    def shown(self) -> str:
        """The verdict as the tables say it: 'not decidable at 8 seeds' (the fewest seeds of
        its not-decidable orderings), else the verdict."""
        if self.verdict != UNDECIDABLE:
            return self.verdict
        n = min((k.n for k in self.checks if k.verdict == UNDECIDABLE), default=0)
        return f"{UNDECIDABLE} at {n} seed{'s' * (n != 1)}"

    @property
    def seeds_needed(self) -> float:
        """Paired seeds that would decide every ordering at the family's level with power 0.8
        at the observed effects and spreads (the most any one needs); nan where an ordering
        has < 2 seeds."""
        needed = [c.seeds_needed for c in self.checks]
        return math.nan if not needed or any(map(math.isnan, needed)) else max(needed)

    @property
    def rerun_keeps(self) -> float:
        """The model's approximate chance that an independent experiment with as many seeds
        repeats the claim's uncorrected verdict: holds, its least sure ordering's chance to
        hold again; contradicted, its surest contradicted ordering's; nan for the others."""
        if self.uncorrected == "holds":
            return min(c.rerun_keeps for c in self.checks)
        if self.uncorrected == "contradicted":
            return max(c.rerun_keeps for c in self.checks if c.uncorrected == "contradicted")
        return math.nan


def _spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    return f"{mean:.4g}" if len(values) == 1 else f"{mean:.4g} ± {statistics.stdev(values):.2g}"


def decide(verdicts: Sequence[str]) -> str:
    """A claim's verdict from its orderings' (see the module docstring): contradicted
    outranks n/a; not decidable outranks inconclusive."""
    if "contradicted" in verdicts:
        return "contradicted"
    if verdicts and all(v == "holds" for v in verdicts):
        return "holds"
    if not verdicts or "n/a" in verdicts:
        return "n/a"
    return UNDECIDABLE if UNDECIDABLE in verdicts else "inconclusive"


def check(results: Results, key: str, text: str, orderings: Sequence[Ordering]) -> Claim:
    """One claim's orderings, each with its paired differences and uncorrected verdict; the
    rule's verdicts come from apply_rule, across every claim."""
    cache: dict[tuple[str, str], dict[int, float]] = {}

    def vals(metric: str, letter: str) -> dict[int, float]:
        if (metric, letter) not in cache:
            cache[metric, letter] = values_of(results, metric, by_letter().get(letter, letter))
        return cache[metric, letter]

    checks, missing = [], []
    for o in orderings:
        low, high = vals(o.metric, o.low), vals(o.metric, o.high)
        seeds = sorted(set(low) & set(high))
        d = {s: high[s] - low[s] for s in seeds}
        interval = Interval.of(list(d.values()))
        verdict = interval.verdict()
        checks.append(Checked(o.label(), str(interval), verdict, rerun_keeps=interval.rerun_keeps(),
                              uncorrected=verdict, differences=d))  # fmt: skip
        missing += [f"{x}@{o.metric}" for x, v in ((o.low, low), (o.high, high)) if not v]
    shown, metrics = [], list(dict.fromkeys(o.metric for o in orderings))
    for metric in metrics:
        letters = sorted({x for o in orderings if o.metric == metric for x in (o.low, o.high)})
        per = "; ".join(f"({x}) {_spread(list(vals(metric, x).values()))}" for x in letters)
        shown.append(per if len(metrics) == 1 else f"{metric}: {per}")
    value = " | ".join(shown) or "-"
    if missing:
        why = "; ".join(dict.fromkeys(filter(None, (absent_reason(results, o.metric)
                                                    for o in orderings))))  # fmt: skip
        value += f" [missing: {', '.join(dict.fromkeys(missing))}{f' ({why})' if why else ''}]"
    letters = tuple(sorted({x for o in orderings for x in (o.low, o.high)}))
    verdict = decide([c.verdict for c in checks])
    return Claim(key, text, value, verdict, checks, letters, uncorrected=verdict)


def paper_family(c: Claim) -> str:
    return "primary" if c.key in PRIMARY else "secondary"


def apply_rule(
    checked: list[Claim], family: Callable[[Claim], str] = paper_family, flips: bool = True
) -> list[Claim]:
    """The rule of the module docstring across every claim: each ordering tested in its
    claim's family (the paper's: PRIMARY or not; a multiplicity.CORRECTIONS name), corrected
    there, with leave-one-out (flips=False: without, multiplicity.rule); then each claim's
    verdict from its orderings'. Returns the same claims."""
    families: dict[str, dict[str, dict[int, float]]] = {}
    for c in checked:
        c.family = family(c)
        orderings = families.setdefault(c.family, {})
        for k in c.checks:  # the same ordering in two claims of a family: one hypothesis
            orderings[k.ordering] = k.differences
    tested = rule(families, flips)
    for c in checked:
        c.m, c.orderings = len(tested[c.family]), sum(map(bool, families[c.family].values()))
        # one seed tests nothing (m = 0): the level and floor its orderings will meet once tested
        m = c.m or c.orderings
        level = ALPHA / max(m, 1)  # Holm's first step; Benjamini-Hochberg's strictest
        c.floor = floor_of(m)
        for k in c.checks:
            k.apply(tested[c.family].get(k.ordering), level)
        c.verdict = decide([k.verdict for k in c.checks]) if c.checks else c.verdict
    return checked


def in_scope(checked: list[Claim], variants: Sequence[str]) -> tuple[list[Claim], list[Claim]]:
    """(claims whose variants the pipeline runs, the others). A pipeline that leaves a variant
    out (scaling_laws runs no (c)-(f)) does not test its claims: they are named, not tabled.
    No variants given: every claim is in scope."""
    if not variants:
        return checked, []
    letters = {facts(v).letter for v in variants}
    return (
        [c for c in checked if set(c.letters) <= letters],
        [c for c in checked if not set(c.letters) <= letters],
    )


def below(metric: str, low: str, *highs: str) -> list[Ordering]:
    return [Ordering(metric, low, h) for h in highs]


def above(metric: str, high: str, *lows: str) -> list[Ordering]:
    return [Ordering(metric, lo, high) for lo in lows]


def long_multiples(results: Results) -> list[str]:
    """The evaluated loss multiples past the training length, in numeric order (a table's:
    its loss columns, and those it says are absent: the claims need them)."""
    if results.table is not None:
        columns = {m for v in results.table.values() for m in v} | set(results.absent)
        ks = {c[len("loss @") : -1] for c in columns if re.fullmatch(r"loss @[\d.]+x", c)}
    else:
        ks = {k for runs in results.nodes.get("eval_loss", {}).values() for o in runs.values()
              for k in o.loss_at}  # fmt: skip
    return [k for k in sorted(ks, key=float) if float(k) > 1]


def claims(results: Results, flips: bool = True) -> list[Claim]:
    """Every ordering the paper states, in the paper's order, judged by the rule."""
    return apply_rule(paper_claims(results), flips=flips)


def paper_claims(results: Results) -> list[Claim]:
    """Every claim of the paper, its orderings' differences and uncorrected verdicts, not yet
    judged (apply_rule judges a list of them as the families it makes)."""
    # no loss evals at all: one placeholder, so the claim still names its variants (n/a)
    long = [f"loss@{k}" for k in long_multiples(results)] or ["loss@past N"]
    pre, niah, top = "pretrain_loss", "niah", "needle_top"
    specs = [
        ("pretrain_lower", "Sec. 3.1, Fig. 4: (b), (c), (d) reach a lower pretraining loss "
         "(here: final validation loss) than (a)", below(pre, "b", "a") + below(pre, "c", "a")
         + below(pre, "d", "a")),
        ("pretrain_bias_lowest", "Sec. 3.1: (d), with the bias, has the lowest pretraining "
         "loss of (a)-(d)", below(pre, "d", "a", "b", "c")),
        ("long_loss_bc", "Sec. 3.2, Fig. 5: past the training length (theta x50), (b) and (c) "
         "keep a lower loss than (a), at every evaluated multiple",
         [o for m in long for o in below(m, "b", "a") + below(m, "c", "a")]),
        ("long_loss_d_between", "Sec. 3.2: past the training length, (d) lies between (b) "
         "and (a)", [o for m in long for o in below(m, "b", "d") + below(m, "d", "a")]),
        ("theta_robust", "Sec. 3.2: (a) is not robust to theta x50 even at the training "
         "length; (b) and (c) are more robust (smaller rise of the loss at 1x from theta "
         "x50)", below("theta_penalty", "b", "a") + below("theta_penalty", "c", "a")),
        ("short_loss_e", "Sec. 3.2: (e), swapped after pretraining, has a higher loss than (a) "
         "at short context (1x, theta x50)", below("loss@1", "a", "e")),
        ("long_loss_f", "Sec. 3.2: (f), switched during pretraining, comes close to (b) but "
         "not all the way: (b) < (f) < (a) past the training length",
         [o for m in long for o in below(m, "b", "f") + below(m, "f", "a")]),
        ("niah_b_above_a", "Sec. 3.3, Fig. 6: (b) retrieves better than (a) past the training "
         "length (mean NIAH accuracy over contexts > 1x and depths)", above(niah, "b", "a")),
        ("niah_c_below_b", "Sec. 3.3: (c), without s, retrieves worse than (b)",
         below(niah, "c", "b")),
        ("niah_d_between", "Sec. 3.3: (d), with the bias, retrieves better than (a) but worse "
         "than (b)", above(niah, "d", "a") + below(niah, "d", "b")),
        ("niah_ef_between", "Sec. 3.3: (e) and (f) retrieve better than (a) but worse than (b)",
         above(niah, "e", "a") + above(niah, "f", "a") + below(niah, "e", "b")
         + below(niah, "f", "b")),
        ("niah_f_above_e", "Sec. 3.3: (f) retrieves better than (e)", above(niah, "f", "e")),
        ("needle_b_above_a", "Sec. 3.4, Fig. 8: mean top needle score of (b) above (a)",
         above(top, "b", "a")),
        ("needle_b_highest", "Sec. 3.4, Fig. 8: (b) has the highest mean top needle score of "
         "(a)-(f)", above(top, "b", "a", "c", "d", "e", "f")),
        ("needle_c_below_b", "Sec. 3.4: (c) has lower top needle scores than (b)",
         below(top, "c", "b")),
        ("needle_d_between", "Sec. 3.4: (d) scores above (a) but below (b)",
         above(top, "d", "a") + below(top, "d", "b")),
        ("needle_ef_between", "Sec. 3.4: (e) and (f) score above (a) and below (b)",
         above(top, "e", "a") + above(top, "f", "a") + below(top, "e", "b")
         + below(top, "f", "b")),
        ("needle_f_above_e", "Sec. 3.4: (f) scores above (e)", above(top, "f", "e")),
    ]  # fmt: skip
    out = [check(results, key, text, orderings) for key, text, orderings in specs]
    return [*out, pn_log_law(results)]


def _rationale() -> tuple[str, ...]:
    """The letter of the rationale model (Sec. 2.1: learned p_n), the claim's one variant."""
    return tuple(facts(v).letter for v in names() if learns_p_n(v))[:1]


def pn_log_law(results: Results) -> Claim:
    text = f"Sec. 2.1, Fig. 2: learned p_n follows a1 log n + a2 (R² >= {R2_LOG_LAW})"
    r2, value, why = _pn_r2(results)
    if not r2:
        return Claim("pn_log_law", text, f"- [{why}]", "n/a", letters=_rationale())
    interval = Interval.of(list(r2.values()))
    verdict = interval.verdict(R2_LOG_LAW)
    keeps = interval.rerun_keeps(R2_LOG_LAW)
    d = {s: r - R2_LOG_LAW for s, r in r2.items()}
    check_ = Checked(f"R² > {R2_LOG_LAW}", f"R² {interval}", verdict, rerun_keeps=keeps,
                     uncorrected=verdict, differences=d, threshold=R2_LOG_LAW)  # fmt: skip
    return Claim("pn_log_law", text, value, verdict, [check_], _rationale(), verdict)


def _pn_r2(results: Results) -> tuple[dict[int, float], str, str]:
    """(seed -> R² of the learned p_n's log fit, the claim's value, why there is none)."""
    if results.table is not None:
        rationale = [v for v in names() if learns_p_n(v)][:1]
        r2 = values_of(results, "pn_r2", rationale[0]) if rationale else {}
        why = absent_reason(results, "pn_r2") or "no p_n"
        return r2, f"R² {_spread(list(r2.values()))}; a1, a2: not in the table", why

    fits = pn_fits(results)
    r2 = {s: f.r2 for s, (_, f) in fits.items() if not math.isnan(f.r2)}
    a1 = _spread([f.a1 for _, f in fits.values()])
    a2 = _spread([f.a2 for _, f in fits.values()])
    why = "no p_n" if not fits else "p_n constant: R² undefined"
    return r2, f"R² {_spread(list(r2.values()))}; a1 {a1}, a2 {a2}", why
