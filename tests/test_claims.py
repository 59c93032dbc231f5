"""The claim rule on constructed results: paired by seed, 95% t-interval, three verdicts."""

from __future__ import annotations

import math

import pytest

from ssmax.report.claims import claims, decide, in_scope
from ssmax.report.gather import Results, Settings
from ssmax.report.render import _claim_rows, untested_line
from ssmax.report.stats import Interval, seeds_for_power, t975

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
    return Results.from_inputs(inputs, Settings("test", [0, 1, 2], 128))


def claim(res: Results, key: str):  # noqa: ANN201
    return next(c for c in claims(res) if c.key == key)


def test_clear_effect_holds() -> None:
    res = results({"a": [4.50, 4.61, 4.55], "b": [4.40, 4.50, 4.46], "c": [4.41, 4.52, 4.45],
                   "d": [4.39, 4.49, 4.44]})  # fmt: skip
    c = claim(res, "pretrain_lower")
    assert c.verdict == "holds"
    assert [k.verdict for k in c.checks] == ["holds"] * 3
    assert "b < a" in c.checks[0].ordering and "+0.1" in c.checks[0].difference


def test_reversed_effect_is_contradicted() -> None:
    res = results({"a": [4.40, 4.50, 4.46], "b": [4.50, 4.61, 4.55], "c": [4.50, 4.60, 4.56],
                   "d": [4.51, 4.62, 4.57]})  # fmt: skip
    assert claim(res, "pretrain_lower").verdict == "contradicted"


def test_effect_within_noise_is_inconclusive() -> None:
    # mean difference +0.01 but the seeds disagree in sign
    res = results({"a": [4.50, 4.40, 4.60], "b": [4.45, 4.43, 4.59], "c": [4.48, 4.41, 4.55],
                   "d": [4.55, 4.35, 4.57]})  # fmt: skip
    c = claim(res, "pretrain_lower")
    assert c.verdict == "inconclusive"
    assert all(k.verdict == "inconclusive" for k in c.checks)


def test_one_seed_is_inconclusive_however_large_the_gap() -> None:
    res = results({"a": [9.0], "b": [1.0], "c": [1.0], "d": [1.0]})
    c = claim(res, "pretrain_lower")
    assert c.verdict == "inconclusive" and "1 seed" in c.checks[0].difference


def test_pairing_by_seed_sees_a_consistent_gap_under_large_seed_spread() -> None:
    """Seeds differ by a lot, (b) is always 0.01 below (a) in the same seed: paired, it holds
    (an unpaired comparison of the means would call it noise)."""
    a = [4.0, 4.5, 5.0, 4.2]
    b = [x - 0.01 for x in a]
    res = results({"a": a, "b": b, "c": b, "d": b})
    assert claim(res, "pretrain_lower").verdict == "holds"


def test_one_evaluated_multiple_does_not_crash() -> None:
    """eval.loss.report_multiples=[1, 20]: one multiple past the training length."""
    loss = {"a": {"1": [3.0, 3.1, 3.2], "20": [5.0, 5.2, 5.1]},
            "b": {"1": [3.0, 3.1, 3.2], "20": [4.0, 4.1, 4.05]},
            "c": {"1": [3.0, 3.1, 3.2], "20": [4.2, 4.3, 4.2]}}  # fmt: skip
    res = results({}, loss)
    c = claim(res, "long_loss_bc")
    assert c.verdict == "holds"
    assert [k.ordering for k in c.checks] == ["b < a on loss@20", "c < a on loss@20"]
    assert claim(res, "long_loss_d_between").verdict == "n/a"  # no (d): missing, not a crash


def test_missing_variant_is_na() -> None:
    res = results({"a": [4.5, 4.6], "b": [4.4, 4.5]})
    c = claim(res, "pretrain_lower")
    assert c.verdict == "n/a" and "missing" in c.value


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
    """(b) - (a) per seed: 0.10, 0.00, 0.20 (mean 0.1, sd 0.1: d = 1, 10 seeds for power 0.8);
    (c) - (a): 0.10 always (no spread: 2 seeds); the claim needs the most of its orderings."""
    a = [4.5, 4.6, 4.4]
    res = results({"a": a, "b": [a[0] - 0.1, a[1], a[2] - 0.2], "c": [x - 0.1 for x in a],
                   "d": [x - 0.1 for x in a]})  # fmt: skip
    c = claim(res, "pretrain_lower")
    assert c.verdict == "inconclusive"
    assert [k.seeds_needed for k in c.checks] == [seeds_for_power(0.1, 0.1), 2, 2] == [10, 2, 2]
    assert c.seeds_needed == 10
    row = _claim_rows([c])[0]
    assert row[3:5] == ["INCONCLUSIVE", "10"] and "inconclusive (decided by 10;" in row[2]
    one_seed = claim(results({"a": [4.5], "b": [4.4], "c": [4.4], "d": [4.4]}), "pretrain_lower")
    assert math.isnan(one_seed.seeds_needed) and _claim_rows([one_seed])[0][4] == "-"
    no_effect = claim(results({"a": a, "b": a, "c": a, "d": a}), "pretrain_lower")
    assert no_effect.seeds_needed == math.inf and _claim_rows([no_effect])[0][4] == "none"


def test_each_verdict_says_how_likely_a_rerun_with_fresh_noise_repeats_it() -> None:
    """A claim that holds is at most as sure as its least sure ordering; a contradicted one at
    least as sure as its surest contradicted ordering; an inconclusive one gets no bound."""
    a = [4.5, 4.6, 4.4, 4.55]
    near = [0.10, 0.04, 0.12, 0.06]  # (b) below (a) by a little: holds, near its edge
    far = [0.30, 0.31, 0.29, 0.30]  # (c), (d): by far
    res = results({"a": a, "b": [x - d for x, d in zip(a, near, strict=True)],
                   "c": [x - d for x, d in zip(a, far, strict=True)],
                   "d": [x - d - 0.01 for x, d in zip(a, far, strict=True)]})  # fmt: skip
    c = claim(res, "pretrain_lower")
    assert c.verdict == "holds"
    keeps = [k.rerun_keeps for k in c.checks]
    assert keeps[0] == pytest.approx(Interval.of(near).rerun_keeps()) and keeps[0] < 0.95
    assert min(keeps[1:]) > 0.95
    assert c.rerun_keeps == keeps[0]
    row = _claim_rows([c])[0]
    assert row[5] == f"≤ {keeps[0]:.2f}" and f"same on a rerun {keeps[0]:.2f})" in row[2]
    open_ = [0.01, -0.01, 0.02, -0.02]  # (d): no effect, an open ordering sure to stay open
    worse = results({"a": a, "b": [x + d for x, d in zip(a, near, strict=True)],
                     "c": [x + d + 0.01 for x, d in zip(a, near, strict=True)],
                     "d": [x + d for x, d in zip(a, open_, strict=True)]})  # fmt: skip
    c = claim(worse, "pretrain_lower")
    assert [k.verdict for k in c.checks] == ["contradicted", "contradicted", "inconclusive"]
    assert c.rerun_keeps == max(k.rerun_keeps for k in c.checks[:2]) < c.checks[2].rerun_keeps
    assert _claim_rows([c])[0][5] == f"≥ {c.rerun_keeps:.2f}"
    undecided = claim(results({"a": a, "b": a, "c": a, "d": a}), "pretrain_lower")
    assert math.isnan(undecided.rerun_keeps) and _claim_rows([undecided])[0][5] == "-"
