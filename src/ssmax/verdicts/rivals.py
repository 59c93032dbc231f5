"""The rival laws of issue 43 in the report: their papers' claims and the leaderboard.

Both only where the run holds a rival law (a letter of RIVALS' orderings other than (a) and
(b)); a run without one (the paper pipeline) gets neither, and the paper's families are
untouched: these are families of their own, judged by the rule of verdicts.claims.

- RIVALS, the claims docs/rival-laws.md wrote down before any verdict seed of these laws ran
  ("Claims written before any seed of theirs ran"), each its paper's headline claim: the
  family "rivals", corrected by Holm. "At least as good" is tested as the ordering "better"
  (holds when the law is decidedly better, contradicted when decidedly worse); its text says
  that an inconclusive verdict does not contradict it.
- The leaderboard: every law present other than (a) and (b), its mean and 95% t-interval on
  each headline measure (NIAH past 1x, top needle score, loss at each evaluated multiple past
  the training length: 5x, 10x, 20x in the tiny preset, as the paper's loss claims), and its
  paired difference to (a) and to (b), oriented so that positive is the law's better side
  (lower loss, higher NIAH and needle score): the family "leaderboard", corrected by
  Benjamini-Hochberg; better / worse where the rule decides, else the seeds it would take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from ssmax.config.variants import by_letter, facts
from ssmax.verdicts.claims import Checked, Claim, Ordering, apply_rule, check, long_multiples
from ssmax.verdicts.metrics import values_of
from ssmax.verdicts.results import Results
from ssmax.verdicts.stats import Interval

NIAH, TOP = "niah", "needle_top"
BASES = ("a", "b")  # what every law is compared with
NOT_CONTRADICTED = "; an inconclusive verdict does not contradict it (at least as good)"


def _lower_loss(long: Sequence[str], low: str, high: str) -> list[Ordering]:
    return [Ordering(m, low, high) for m in long]


def rival_specs(long: Sequence[str]) -> list[tuple[str, str, list[Ordering]]]:
    """(key, text, orderings) of docs/rival-laws.md's five claims, as written there."""
    return [
        ("rival_k_loss", "Claim of Anson et al. (NeurIPS 2025), Table 1: scale-invariant "
         "p-RoPE (k) has a lower loss than LogN/SSMax (b) past the training length (theta x50)",
         _lower_loss(long, "k", "b")),
        ("rival_k_niah", "Claim of Anson et al. (NeurIPS 2025), Table 2: the retrieval of (k) "
         "past the training length is at least as good as LogN's (b)" + NOT_CONTRADICTED,
         [Ordering(NIAH, "b", "k")]),
        ("rival_l_loss", "Claim of Vasylenko et al. (ICLR 2026): ASEntmax (l) has a lower "
         "loss than scalable softmax (b) at longer contexts", _lower_loss(long, "l", "b")),
        ("rival_l_niah", "Claim of Vasylenko et al. (ICLR 2026): ASEntmax (l) retrieves better "
         "than scalable softmax (b) past the training length", [Ordering(NIAH, "b", "l")]),
        ("rival_m_loss", "Claim of Peng et al. (2023), Sec. 3.4: YaRN's temperature (m) lowers "
         "the loss of the unscaled model (a) at extended context (no claim against SSMax)",
         _lower_loss(long, "m", "a")),
        *arm_specs(long),
    ]  # fmt: skip


def arm_specs(long: Sequence[str]) -> list[tuple[str, str, list[Ordering]]]:
    """(key, text, orderings) of the claims docs/rival-laws.md wrote down for issue 60's arms
    and the rivals as their papers run them, before any seed of theirs ran (2026-11-29)."""
    return [
        ("arm_n_pretrain", "Claim of Qiu et al. (NeurIPS 2025): gated attention (n) reaches a "
         "lower pretraining loss than softmax (a)", [Ordering("pretrain_loss", "n", "a")]),
        ("arm_n_loss", "Claim of Qiu et al. (NeurIPS 2025): gated attention (n) has a lower loss "
         "than softmax (a) past the training length", _lower_loss(long, "n", "a")),
        ("arm_n_niah", "Claim of Qiu et al. (NeurIPS 2025): gated attention (n) retrieves better "
         "than softmax (a) past the training length", [Ordering(NIAH, "a", "n")]),
        ("arm_o_loss", "Whether the gate adds to SSMax (as OLMo-core pairs them): gated attention "
         "with SSMax (o) has a lower loss than SSMax (b) past the training length",
         _lower_loss(long, "o", "b")),
        ("arm_o_niah", "Whether the gate adds to SSMax (as OLMo-core pairs them): gated attention "
         "with SSMax (o) retrieves better than SSMax (b) past the training length",
         [Ordering(NIAH, "b", "o")]),
        ("arm_p_niah", "Claim of Velickovic et al. (ICML 2025): adaptive temperature (p) retrieves "
         "better than softmax (a), on its weights, past the training length, at no training cost",
         [Ordering(NIAH, "a", "p")]),
        ("rival_k2_loss", "Claim of Anson et al. (NeurIPS 2025), Table 1, evaluated as they do "
         "(RoPE as trained): (k2) has a lower loss than LogN/SSMax (b) past the training length",
         _lower_loss(long, "k2", "b")),
        ("rival_k2_niah", "Claim of Anson et al. (NeurIPS 2025), Table 2, evaluated as they do "
         "(RoPE as trained): the retrieval of (k2) past the training length is at least as good "
         "as LogN's (b)" + NOT_CONTRADICTED, [Ordering(NIAH, "b", "k2")]),
        ("rival_l2_loss", "Claim of Vasylenko et al. (ICLR 2026), with NAPE as they run it: "
         "(l2) has a lower loss than scalable softmax (b) at longer contexts",
         _lower_loss(long, "l2", "b")),
        ("rival_l2_niah", "Claim of Vasylenko et al. (ICLR 2026), with NAPE as they run it: "
         "(l2) retrieves better than scalable softmax (b) past the training length",
         [Ordering(NIAH, "b", "l2")]),
        ("rival_m3_loss", "Claim of Peng et al. (2023), Sec. 3.2-3.4, as YaRN runs it (dynamic "
         "interpolation and temperature, (m3)): it lowers the loss of the unscaled model (a) at "
         "extended context", _lower_loss(long, "m3", "a")),
    ]  # fmt: skip


def _long(results: Results) -> list[str]:
    return [f"loss@{k}" for k in long_multiples(results)] or ["loss@past N"]


def rival_letters() -> set[str]:
    """The rival laws: the letters the claims of RIVALS name besides (a) and (b)."""
    specs = rival_specs(["loss@past N"])
    return {x for _, _, os in specs for o in os for x in (o.low, o.high)} - set(BASES)


def present(results: Results, variants: Sequence[str]) -> set[str]:
    """The letters of the run's variants that go through the evals (none given: those with
    eval outputs in the results)."""
    if not variants:
        variants = {v for s in ("eval_loss", "eval_niah") for v in results.variants(s)}
    return {facts(v).letter for v in variants if facts(v).evals}


def rival_claims(results: Results, variants: Sequence[str] = (), flips: bool = True) -> list[Claim]:
    """The rivals' claims whose variants the run holds, judged as the family "rivals"
    (Holm); [] where the run holds no rival law."""
    letters = present(results, variants)
    if not letters & rival_letters():
        return []
    checked = [check(results, key, text, orderings)
               for key, text, orderings in rival_specs(_long(results))
               if {x for o in orderings for x in (o.low, o.high)} <= letters]  # fmt: skip
    return apply_rule(checked, family=lambda c: "rivals", flips=flips)


@dataclass
class Row:
    """One law on one measure: its own values and its differences to (a) and (b)."""

    law: str  # letter
    measure: str  # a values_of metric
    own: str  # mean [95% t-interval] (n)
    against: dict[str, Checked] = field(default_factory=dict)  # base letter -> its ordering


def better(measure: str, law: str, base: str) -> Ordering:
    """The ordering "law better than base": positive d is the law's better side."""
    return Ordering(measure, law, base) if measure.startswith("loss@") else Ordering(
        measure, base, law)  # fmt: skip


def _own(i: Interval) -> str:
    """A law's own mean [95% t-interval] (seeds), unsigned (its value, not a difference)."""
    if i.n < 2:
        return "-" if i.n == 0 else f"{i.mean:.4g} (1 seed)"
    return f"{i.mean:.4g} [{i.lo:.4g}, {i.hi:.4g}] (n={i.n})"


def leaderboard(results: Results, variants: Sequence[str] = ()) -> tuple[list[Row], Claim | None]:
    """(rows, the family's claim-like record: m and the permutation floor), ([], None) where
    the run holds no rival law."""
    letters = present(results, variants)
    if not letters & rival_letters():
        return [], None
    return board(results, sorted(letters - set(BASES)))


def board(results: Results, laws: Sequence[str], flips: bool = True) -> tuple[list[Row], Claim]:
    """The family "leaderboard" of one run: each law (letters, none of them a base) against (a)
    and (b) on each headline measure the run has, Benjamini-Hochberg; (rows, the family's
    claim-like record). report.published.board reads every run's laws this way."""
    family = check(results, "leaderboard", "every law against (a) and (b)",
                   board_orderings(results, laws))  # fmt: skip
    apply_rule([family], family=lambda c: "leaderboard", flips=flips)
    return board_rows_of(results, laws, family), family


def board_orderings(results: Results, laws: Sequence[str]) -> list[Ordering]:
    """The family's orderings, law by law, measure by measure, (a) then (b)."""
    measures = [NIAH, TOP, *_long(results)]
    return [better(m, law, base) for law in laws for m in measures for base in BASES]


def board_rows_of(results: Results, laws: Sequence[str], family: Claim) -> list[Row]:
    """The rows of a judged family "leaderboard" over these laws (its checks in
    board_orderings' order)."""
    checks, rows = iter(family.checks), []
    for law in laws:
        for m in [NIAH, TOP, *_long(results)]:
            own = Interval.of(list(values_of(results, m, by_letter().get(law, law)).values()))
            rows.append(Row(law, m, _own(own), {base: next(checks) for base in BASES}))
    return rows


def board_json(rows: Sequence[Row], board: Claim | None) -> dict:
    """leaderboard.json: the family (m, permutation floor) and, per law and measure, its
    interval and each difference's checked ordering (as claims.json holds them)."""
    out: dict = {"family": "leaderboard", "m": board.m if board else 0,
                 "floor": board.floor if board else 0, "laws": {}}  # fmt: skip
    for r in rows:
        out["laws"].setdefault(r.law, {})[r.measure] = {
            "own": r.own,
            **{f"against_{b}": asdict(k) for b, k in r.against.items()},
        }
    return out
