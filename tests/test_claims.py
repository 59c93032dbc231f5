"""The claim rule on constructed results: paired by seed, the uncorrected 95% t-interval, and
the rule's families, corrections, permutation test and leave-one-out, each shown changing a
verdict on a hand-made case."""

from __future__ import annotations

import math

import pytest

from ssmax.verdicts.claims import PRIMARY, claims, decide, in_scope
from ssmax.verdicts.multiplicity import DISAGREE, UNDECIDABLE
from ssmax.verdicts.results import Results, Settings
from ssmax.verdicts.stats import Interval, seeds_for_power, t975
from ssmax.verdicts.text import claim_rows, primary_lines, untested_line
from tests.typed_outputs import typed

VARIANTS = {
    "a": "a_softmax", "b": "b_ssmax", "c": "c_ssmax_no_scale", "d": "d_ssmax_bias",
    "e": "e_swap_after_pretrain", "f": "f_switch_during_pretrain",
}  # fmt: skip


def results(pretrain: dict[str, list[float]], loss_at: dict[str, dict[str, list[float]]] | None
            = None) -> Results:  # fmt: skip
    """Results with per-seed pretraining losses (and eval losses at multiples)."""
    inputs: dict[str, dict] = {}
    for letter, values in pretrain.items():
        for seed, v in enumerate(values):
            inputs[f"pretrain/{VARIANTS[letter]}/seed{seed}"] = {"val_loss": v}
    for letter, by_k in (loss_at or {}).items():
        seeds = len(next(iter(by_k.values())))
        for seed in range(seeds):
            at = {k: vals[seed] for k, vals in by_k.items()}
            inputs[f"eval_loss/{VARIANTS[letter]}/seed{seed}"] = {"loss_at": at}
    return Results.from_inputs(typed(inputs), Settings("test", [0, 1, 2], 128))


PRIMARY_TEXT = "(b), (c), (d) reach a lower pretraining loss than (a) (Sec. 3.1)"


def claim(res: Results, key: str):  # noqa: ANN201
    return next(c for c in claims(res) if c.key == key)


def test_clear_effect_holds() -> None:
    """Three seeds, one sign: the 95% interval holds (uncorrected); the permutation test of 3
    seeds cannot go below 2 / 2^3 = 0.25, so by the rule the t-test stands alone, the two tests
    disagreeing; 3 seeds are below the family's permutation floor (7 at 0.05 / 3): not
    decidable at 3 seeds, not inconclusive."""
    res = results({"a": [4.50, 4.61, 4.55], "b": [4.40, 4.50, 4.46], "c": [4.41, 4.52, 4.45],
                   "d": [4.39, 4.49, 4.44]})  # fmt: skip
    c = claim(res, "pretrain_lower")
    assert c.uncorrected == "holds" and c.verdict == UNDECIDABLE and c.floor == 7
    assert c.shown == "not decidable at 3 seeds" == c.checks[0].shown
    assert [k.uncorrected for k in c.checks] == ["holds"] * 3
    assert all(k.adj_t < 0.05 and k.p_perm == 0.25 and k.note == DISAGREE for k in c.checks)
    assert "b < a" in c.checks[0].ordering and "+0.1" in c.checks[0].difference


def test_reversed_effect_is_contradicted() -> None:
    res = results({"a": [4.40, 4.50, 4.46], "b": [4.50, 4.61, 4.55], "c": [4.50, 4.60, 4.56],
                   "d": [4.51, 4.62, 4.57]})  # fmt: skip
    assert claim(res, "pretrain_lower").uncorrected == "contradicted"


def test_effect_within_noise_is_inconclusive() -> None:
    # mean difference +0.01 but the seeds disagree in sign; 3 seeds: below the floor
    res = results({"a": [4.50, 4.40, 4.60], "b": [4.45, 4.43, 4.59], "c": [4.48, 4.41, 4.55],
                   "d": [4.55, 4.35, 4.57]})  # fmt: skip
    c = claim(res, "pretrain_lower")
    assert c.uncorrected == "inconclusive" and c.verdict == UNDECIDABLE
    assert all(k.verdict == UNDECIDABLE and k.uncorrected == "inconclusive" for k in c.checks)


def test_one_seed_is_not_decidable_however_large_the_gap() -> None:
    res = results({"a": [9.0], "b": [1.0], "c": [1.0], "d": [1.0]})
    c = claim(res, "pretrain_lower")
    assert c.verdict == UNDECIDABLE and c.uncorrected == "inconclusive"
    assert "1 seed" in c.checks[0].difference and c.shown == "not decidable at 1 seed"
    assert math.isnan(c.checks[0].p_t) and c.checks[0].verdict == UNDECIDABLE  # no test
    # the default `make reproduce-all` (one seed) tests nothing, m = 0; its table says the floor
    # of the family its 3 orderings make once each has 2 seeds (7 at 0.05 / 3), not m = 0's 6
    assert (c.m, c.orderings, c.floor) == (0, 3, 7)
    assert claim_rows([c])[0][1] == ("primary (Holm, m = 0: no ordering has 2 seeds; m = 3 once "
                                     "each has: permutation floor 7 seeds)")  # fmt: skip


def test_the_console_headline_says_the_primary_verdicts_and_the_floor_below_it() -> None:
    """What a pipeline prints at its end (StageSpec.shows): each primary claim's verdict, and
    below the family's floor (7 seeds for these 3 orderings) that no gap decides."""
    gap = [0.10, 0.11, 0.09, 0.12, 0.10, 0.11, 0.10]
    for n in (1, 3, 7):
        a = [4.5 + 0.01 * i for i in range(n)]
        lower = [x - g for x, g in zip(a, gap, strict=False)]
        checked = claims(results({"a": a, "b": lower, "c": lower, "d": lower}))
        lines = primary_lines([c for c in checked if c.key == "pretrain_lower"])
        verdict = "holds" if n == 7 else f"not decidable at {n} seed{'s' * (n > 1)}"
        assert lines[:2] == [f"the paper's primary claims, {n} seed{'s' * (n > 1)}:",
                             f"- {PRIMARY_TEXT}: {verdict}"]  # fmt: skip
        assert lines[2:] == ([] if n == 7 else [
            "(the rule decides none below 7 seeds, however large a gap: `make plan SEEDS=...` "
            "says what more seeds take here)"])  # fmt: skip
    assert primary_lines([c for c in checked if c.family != "primary"]) == []


def test_below_the_floor_an_ordering_is_not_decidable_at_it_inconclusive() -> None:
    """(b) below (a) alone in the primary family (m = 1: floor 6 seeds, 2 / 2^6 <= 0.05), its
    seeds disagreeing in sign: at 5 seeds not decidable (the permutation test cannot reach
    0.05 at all), at 6 inconclusive, said with its effect and 95% t-interval; one seed more or
    less is no flip (both undecided). (The claim is n/a: (c) and (d) are missing.)"""
    d = [0.05, -0.04, 0.03, -0.02, 0.01, -0.03]
    for n, verdict in ((5, UNDECIDABLE), (6, "inconclusive")):
        low, high = paired(4.5, d[:n])
        c = claim(results({"a": high, "b": low}), "pretrain_lower")
        k = c.checks[0]
        assert (c.m, c.floor, k.n) == (1, 6, n) and k.verdict == verdict and c.verdict == "n/a"
        assert not k.flips and f"(n={n})" in k.difference
        assert f"{k.shown};" in claim_rows([c])[0][3]
    assert k.shown == "inconclusive" and "[" in k.difference  # the effect and its interval
    assert claim(results({"a": high[:5], "b": low[:5]}), "pretrain_lower").checks[0].shown == (
        "not decidable at 5 seeds"
    )


def test_claim_precedence_contradicted_holds_na_not_decidable_inconclusive() -> None:
    """A claim: contradicted where any ordering is, whatever else is missing; else holds where
    all hold; else n/a where any is; else not decidable where any is; else inconclusive."""
    assert decide(["contradicted", "n/a"]) == "contradicted"
    assert decide(["n/a", UNDECIDABLE, "contradicted"]) == "contradicted"
    assert decide(["holds", "holds"]) == "holds" and decide([]) == "n/a"
    assert decide(["holds", "n/a", UNDECIDABLE]) == "n/a"
    assert decide(["holds", UNDECIDABLE, "inconclusive"]) == UNDECIDABLE
    assert decide(["holds", "inconclusive", "inconclusive"]) == "inconclusive"


def test_pairing_by_seed_sees_a_consistent_gap_under_large_seed_spread() -> None:
    """Seeds differ by a lot, (b) is always 0.01 below (a) in the same seed: paired, it holds
    (an unpaired comparison of the means would call it noise)."""
    a = [4.0, 4.5, 5.0, 4.2]
    b = [x - 0.01 for x in a]
    res = results({"a": a, "b": b, "c": b, "d": b})
    assert claim(res, "pretrain_lower").uncorrected == "holds"


def test_one_evaluated_multiple_does_not_crash() -> None:
    """eval.loss.report_multiples=[1, 20]: one multiple past the training length."""
    loss = {"a": {"1": [3.0, 3.1, 3.2], "20": [5.0, 5.2, 5.1]},
            "b": {"1": [3.0, 3.1, 3.2], "20": [4.0, 4.1, 4.05]},
            "c": {"1": [3.0, 3.1, 3.2], "20": [4.2, 4.3, 4.2]}}  # fmt: skip
    res = results({}, loss)
    c = claim(res, "long_loss_bc")
    assert c.uncorrected == "holds"
    assert [k.ordering for k in c.checks] == ["b < a on loss@20", "c < a on loss@20"]
    assert claim(res, "long_loss_d_between").verdict == "n/a"  # no (d): missing, not a crash


def test_missing_variant_is_na() -> None:
    res = results({"a": [4.5, 4.6], "b": [4.4, 4.5]})
    c = claim(res, "pretrain_lower")
    assert c.verdict == c.uncorrected == "n/a" and "missing" in c.value
    assert c.checks[2].verdict == "n/a" and math.isnan(c.checks[2].p_t)  # (d): no values


def test_every_claim_of_the_paper_is_listed() -> None:
    keys = [c.key for c in claims(results({}))]
    for needed in ("niah_d_between", "theta_robust", "short_loss_e", "long_loss_f",
                   "needle_c_below_b", "needle_d_between", "needle_ef_between",
                   "needle_f_above_e", "niah_f_above_e", "pn_log_law"):  # fmt: skip
        assert needed in keys
    assert len(keys) == len(set(keys))


def test_interval_and_decision() -> None:
    assert t975(2) == pytest.approx(4.303, abs=1e-3) and t975(1000) == pytest.approx(
        1.962, abs=1e-3
    )
    i = Interval.of([1.0, 2.0, 3.0])
    assert i.mean == 2.0 and i.lo == pytest.approx(2 - 4.303 / math.sqrt(3), abs=1e-3)
    assert Interval.of([0.0, 0.0, 0.0]).verdict() == "inconclusive"  # no effect
    assert Interval.of([0.1, 0.1]).verdict() == "holds"  # consistent, no spread
    assert Interval.of([]).verdict() == "n/a"
    assert decide(["holds", "inconclusive"]) == "inconclusive"
    assert decide(["holds", "contradicted"]) == "contradicted"
    assert decide(["holds", "n/a"]) == "n/a" and decide(["holds", "holds"]) == "holds"


def test_a_pipeline_tests_only_the_claims_of_the_variants_it_runs() -> None:
    checked = claims(results({"a": [4.5, 4.6], "b": [4.4, 4.5]}))
    assert in_scope(checked, []) == (checked, [])  # no declaration given: every claim
    tested, untested = in_scope(checked, ["a_softmax", "b_ssmax", "h_qwen_logn"])
    assert {c.key for c in tested} == {"niah_b_above_a", "needle_b_above_a"}
    assert len(tested) + len(untested) == len(checked)
    assert next(c for c in untested if c.key == "pretrain_lower").letters == ("a", "b", "c", "d")
    assert next(c for c in untested if c.key == "pn_log_law").letters == ("pn",)
    line = untested_line(untested, ["a_softmax", "b_ssmax", "h_qwen_logn"])
    assert line == (f"Not tested here: {len(untested)} claim(s) of the paper need variants this "
                    "pipeline does not run ((c), (d), (e), (f), (pn)); `PIPELINE=paper` runs "
                    "them all.")  # fmt: skip
    assert untested_line([], ["a_softmax"]) == ""


def test_each_claim_says_how_many_seeds_would_decide_it() -> None:
    """(b) - (a) per seed: 0.10, 0.00, 0.20 (mean 0.1, sd 0.1: d = 1); (c) - (a): 0.10 always
    (no spread: 2 seeds); at the primary family's level 0.05 / 3 (its 3 orderings); the claim
    needs the most of its orderings. The permutation test needs 7 seeds for 0.05 / 3."""
    a = [4.5, 4.6, 4.4]
    res = results({"a": a, "b": [a[0] - 0.1, a[1], a[2] - 0.2], "c": [x - 0.1 for x in a],
                   "d": [x - 0.1 for x in a]})  # fmt: skip
    c = claim(res, "pretrain_lower")
    assert c.uncorrected == "inconclusive" and (c.family, c.m, c.floor) == ("primary", 3, 7)
    needed = seeds_for_power(0.1, 0.1, alpha=0.05 / 3)
    assert [k.seeds_needed for k in c.checks] == [needed, 2, 2] and needed > 10  # 10 at 0.05
    assert c.seeds_needed == needed
    row = claim_rows([c])[0]
    assert row[4:7] == ["NOT DECIDABLE AT 3 SEEDS", "inconclusive", f"{needed} (permutation: 7)"]
    assert f"not decidable at 3 seeds; uncorrected inconclusive; decided by {needed}" in row[3]
    one_seed = claim(results({"a": [4.5], "b": [4.4], "c": [4.4], "d": [4.4]}), "pretrain_lower")
    assert math.isnan(one_seed.seeds_needed) and claim_rows([one_seed])[0][6].startswith("- ")
    no_effect = claim(results({"a": a, "b": a, "c": a, "d": a}), "pretrain_lower")
    assert no_effect.seeds_needed == math.inf and claim_rows([no_effect])[0][6].startswith("none")


def test_each_verdict_says_how_likely_an_independent_experiment_repeats_it() -> None:
    """The model's chance, for the uncorrected verdict: a claim that holds takes its least sure
    ordering's; a contradicted one its surest contradicted ordering's; an inconclusive one
    none. No bound sign: it is an approximation, not a bound."""
    a = [4.5, 4.6, 4.4, 4.55]
    near = [0.10, 0.04, 0.12, 0.06]  # (b) below (a) by a little: holds, near its edge
    far = [0.30, 0.31, 0.29, 0.30]  # (c), (d): by far
    res = results({"a": a, "b": [x - d for x, d in zip(a, near, strict=True)],
                   "c": [x - d for x, d in zip(a, far, strict=True)],
                   "d": [x - d - 0.01 for x, d in zip(a, far, strict=True)]})  # fmt: skip
    c = claim(res, "pretrain_lower")
    assert c.uncorrected == "holds"
    keeps = [k.rerun_keeps for k in c.checks]
    assert keeps[0] == pytest.approx(Interval.of(near).rerun_keeps()) and keeps[0] < 0.95
    assert min(keeps[1:]) > 0.95
    assert c.rerun_keeps == keeps[0]
    row = claim_rows([c])[0]
    assert row[7] == f"{keeps[0]:.2f}" and f"repeats (model) {keeps[0]:.2f}" in row[3]
    open_ = [0.01, -0.01, 0.02, -0.02]  # (d): no effect, an open ordering sure to stay open
    worse = results({"a": a, "b": [x + d for x, d in zip(a, near, strict=True)],
                     "c": [x + d + 0.01 for x, d in zip(a, near, strict=True)],
                     "d": [x + d for x, d in zip(a, open_, strict=True)]})  # fmt: skip
    c = claim(worse, "pretrain_lower")
    assert [k.uncorrected for k in c.checks] == ["contradicted", "contradicted", "inconclusive"]
    assert c.rerun_keeps == max(k.rerun_keeps for k in c.checks[:2]) < c.checks[2].rerun_keeps
    assert claim_rows([c])[0][7] == f"{c.rerun_keeps:.2f}"
    undecided = claim(results({"a": a, "b": a, "c": a, "d": a}), "pretrain_lower")
    assert math.isnan(undecided.rerun_keeps) and claim_rows([undecided])[0][7] == "-"


# The rule's own parts (issue 42), each changing a verdict on a hand-made case. The seeds'
# shared effect: large against the differences, so only pairing by seed sees them.
SHIFT = [0.0, 0.4, -0.3, 0.2, -0.1, 0.3, -0.2, 0.1, 0.25]


def paired(base: float, differences: list[float]) -> tuple[list[float], list[float]]:
    """(low, high) per seed: high - low = the given differences, on top of a seed effect."""
    low = [base + SHIFT[i] for i in range(len(differences))]
    return low, [x + d for x, d in zip(low, differences, strict=True)]


def test_the_families_are_the_abstracts_headline_results() -> None:
    assert PRIMARY == ("pretrain_lower", "long_loss_bc", "niah_b_above_a", "needle_b_above_a",
                       "niah_ef_between")  # fmt: skip
    checked = claims(results({"a": [4.5, 4.6], "b": [4.4, 4.5]}))
    assert {c.key for c in checked if c.family == "primary"} == set(PRIMARY)
    assert {c.family for c in checked if c.key not in PRIMARY} == {"secondary"}


def test_holm_over_the_family_turns_a_holding_ordering_inconclusive() -> None:
    """(b) below (a) in 7 of 8 seeds: t p 0.011 and permutation p 6 / 256 = 0.023, and the 95%
    interval holds. Alone in the primary family (no (c), (d): their orderings are untested) it
    holds; beside the 6 loss orderings of Fig. 5 (no effect there) Holm multiplies both p by
    m = 7 (0.077, 0.16): inconclusive, both tests agreeing, the interval unmoved."""
    low, high = paired(4.5, [0.06, 0.02, 0.09, -0.01, 0.1, 0.01, 0.04, 0.07])
    alone = claim(results({"a": high, "b": low}), "pretrain_lower")
    k = alone.checks[0]
    assert alone.m == 1 and (k.uncorrected, k.verdict) == ("holds", "holds")
    assert k.p_t == pytest.approx(0.011, abs=5e-4) and k.p_perm == pytest.approx(6 / 256)
    assert (k.adj_t, k.adj_perm) == (k.p_t, k.p_perm)  # m = 1: nothing to correct
    wobble = [0.02, -0.03, 0.01, -0.02, 0.03, -0.01, 0.02, -0.02]
    loss = {k: [base + x for x in SHIFT[:8]] for k, base in (("5", 5.0), ("10", 5.2), ("20", 5.5))}
    noise = {k: [x + w for x, w in zip(v, wobble, strict=True)] for k, v in loss.items()}
    crowded = claim(results({"a": high, "b": low}, {"a": loss, "b": noise, "c": noise}),
                    "pretrain_lower")  # fmt: skip
    k = crowded.checks[0]
    assert (
        crowded.m == 7
        and k.uncorrected == "holds"
        and (k.p_t, k.p_perm) == (pytest.approx(0.011, abs=5e-4), pytest.approx(6 / 256))
    )
    assert k.adj_t == pytest.approx(7 * k.p_t) and k.adj_perm == pytest.approx(7 * k.p_perm)
    assert (k.verdict, k.note) == (UNDECIDABLE, "") and crowded.floor == 9  # 8 seeds: below


def test_the_permutation_test_rejects_a_verdict_the_t_test_gives() -> None:
    """Three seeds: see test_clear_effect_holds. And the other way round: eight seeds of one
    sign, one of them far out, make the t-test's spread large (t p 0.097) while every sign
    flip of the permutation test still puts the observed mean at the edge (p 2 / 256)."""
    low, high = paired(0.3, [0.31, 0.30, 0.32, 0.29, 0.30, 0.31, 0.33, 3.0])
    k = claim(results({"a": high, "b": low}), "pretrain_lower").checks[0]  # m = 1
    assert k.p_perm == pytest.approx(2 / 256) and k.p_t == pytest.approx(0.097, abs=5e-4)
    assert (k.verdict, k.note) == ("inconclusive", DISAGREE) and k.uncorrected == "inconclusive"
    assert k.outliers == [7]  # the far seed, named


def test_leaving_one_seed_out_flips_a_verdict_and_names_the_seed() -> None:
    """(b)'s top needle score above (a)'s (a family of one ordering) in 7 seeds and below by
    much in seed 7: inconclusive (t p 0.085, permutation p 18 / 256 = 0.070); without seed 7
    the other 7 seeds hold (permutation p 2 / 128); without any other seed, 7 seeds with one
    far below stay inconclusive (0.15, 0.125). Only seed 7 flips it, and it is outlying."""
    d = [0.30, 0.31, 0.29, 0.32, 0.28, 0.30, 0.31, -0.5]
    low, high = paired(0.3, d)
    inputs = {}
    for seed in range(8):
        inputs[f"eval_niah/a_softmax/seed{seed}"] = {"needle_scores": {"top_mean": low[seed]}}
        inputs[f"eval_niah/b_ssmax/seed{seed}"] = {"needle_scores": {"top_mean": high[seed]}}
    res = Results.from_inputs(typed(inputs), Settings("test", list(range(8)), 128))
    c = claim(res, "needle_b_above_a")
    k = c.checks[0]
    assert (c.family, c.m) == ("primary", 1) and k.verdict == "inconclusive"
    assert k.p_perm == pytest.approx(18 / 256) and k.p_t == pytest.approx(0.085, abs=5e-4)
    assert k.flips == [7] and k.outliers == [7]
    row = claim_rows([c])[0]
    assert "flips without seed 7" in row[3] and "outlying seed 7" in row[3]
    held = claim(res, "needle_b_highest").checks[0]  # the same ordering, secondary: BH of one
    assert held.ordering == k.ordering and held.flips == [7]


def test_holm_is_stricter_than_benjamini_hochberg_on_the_same_evidence() -> None:
    """Seven primary orderings of one sign in 8 seeds (pretraining's 3 and Fig. 5's 4 at two
    multiples; permutation p 2 / 256 each): Holm multiplies the smallest by m = 7 (0.055), so
    the permutation test decides none of them while the t-test decides all ("disagree"): 8
    seeds are below the floor, not decidable. Nine secondary orderings of one sign (the needle
    orderings among (a)-(f)): Benjamini-Hochberg keeps each at 2 / 256, and they hold: a
    decided verdict stands below the floor (9 seeds at 0.05 / 9)."""
    wobble = [0.004, -0.003, 0.002, -0.001, 0.003, -0.004, 0.001, 0.0]
    level = {"a": 4.5, "b": 4.3, "c": 4.35, "d": 4.2}

    def per_seed(base: float, tilt: float) -> list[float]:
        return [base + SHIFT[i] + tilt * wobble[i] for i in range(8)]

    pretrain = {x: per_seed(v, i) for i, (x, v) in enumerate(level.items())}
    loss = {x: {k: per_seed(v + int(k) / 10, i + 2) for k in ("5", "20")}
            for i, (x, v) in enumerate(level.items()) if x != "d"}  # fmt: skip
    checked = claims(results(pretrain, loss))
    primary = [k for c in checked if c.family == "primary" for k in c.checks if k.differences]
    assert len(primary) == 7 and {c.m for c in checked if c.family == "primary"} == {7}
    for k in primary:
        assert k.p_perm == pytest.approx(2 / 256) and k.adj_perm == pytest.approx(7 * 2 / 256)
        assert k.adj_t < 0.05 and (k.verdict, k.note) == (UNDECIDABLE, DISAGREE)  # floor 9
    top = {"a": 0.2, "e": 0.4, "c": 0.5, "d": 0.6, "f": 0.7, "b": 0.8}
    inputs = {f"eval_niah/{VARIANTS[x]}/seed{s}": {"needle_scores": {"top_mean": v}}
              for i, (x, base) in enumerate(top.items())
              for s, v in enumerate(per_seed(base, i))}  # fmt: skip
    needles = claims(Results.from_inputs(typed(inputs), Settings("test", list(range(8)), 128)))
    secondary = {k.ordering: k for c in needles if c.family == "secondary" for k in c.checks
                 if k.differences}  # fmt: skip
    assert len(secondary) == 9 and {c.m for c in needles if c.family == "secondary"} == {9}
    for k in secondary.values():
        assert k.adj_perm == pytest.approx(2 / 256) and k.verdict == "holds", k
    assert {c.key: c.verdict for c in needles if c.key.startswith("needle")} == dict.fromkeys(
        ["needle_b_above_a", "needle_b_highest", "needle_c_below_b", "needle_d_between",
         "needle_ef_between", "needle_f_above_e"], "holds")  # fmt: skip
