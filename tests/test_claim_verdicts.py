"""Every claim's verdict on hand-made results whose answer is known in advance.

Each claim of ``claims()`` gets a table of per-variant values of its metric that make the
paper's statement true, written here in the paper's own terms (lower loss and lower theta
penalty are better; higher NIAH accuracy and higher top needle score are better), independently
of ``below()``/``above()`` in claims.py, plus one value that makes the statement false. From
them: a world where the claim holds, one where it is contradicted, and one where the seeds
disagree (inconclusive). The values reach ``values_of`` through node outputs of the shapes the
stages write (val_loss, loss_at, base_theta_loss_at_1x, accuracy_grid, needle_scores, p_n
state dicts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ssmax.verdicts.claims import R2_LOG_LAW, Claim, claims, in_scope
from ssmax.verdicts.metrics import values_of
from ssmax.verdicts.multiplicity import UNDECIDABLE
from ssmax.verdicts.pn_fit import pn_fits
from ssmax.verdicts.results import Results, Settings
from tests.typed_outputs import typed

VARIANTS = {
    "a": "a_softmax", "b": "b_ssmax", "c": "c_ssmax_no_scale", "d": "d_ssmax_bias",
    "e": "e_swap_after_pretrain", "f": "f_switch_during_pretrain", "pn": "pn_rationale",
}  # fmt: skip
Table = dict[str, dict[int, float]]  # letter -> seed -> value of one metric

NIAH_MULTIPLES = [1, 2, 4]
LONG = ("4", "16")  # loss multiples past the training length; "16" sorts before "4" as text


@dataclass(frozen=True)
class Spec:
    """One claim: its metric, values that make the paper's statement true, and one
    (letter, value) that makes it clearly false."""

    metric: str  # a values_of metric, or "long_loss": the loss at every multiple of LONG
    good: dict[str, float]
    broken: tuple[str, float]


# fmt: off
SPECS = {
    # lower pretraining loss is better
    "pretrain_lower": Spec("pretrain_loss", {"a": 4.0, "b": 3.6, "c": 3.7, "d": 3.5}, ("c", 4.3)),
    "pretrain_bias_lowest": Spec("pretrain_loss", {"a": 4.0, "b": 3.6, "c": 3.7, "d": 3.4},
                                 ("d", 3.8)),
    # lower loss past the training length is better
    "long_loss_bc": Spec("long_loss", {"a": 5.0, "b": 4.0, "c": 4.3}, ("b", 5.5)),
    "long_loss_d_between": Spec("long_loss", {"a": 5.0, "b": 4.0, "d": 4.5}, ("d", 3.6)),
    "long_loss_f": Spec("long_loss", {"a": 5.0, "b": 4.0, "f": 4.4}, ("f", 5.4)),
    # a smaller rise of the loss at 1x from theta x50 is more robust
    "theta_robust": Spec("theta_penalty", {"a": 0.9, "b": 0.1, "c": 0.2}, ("c", 1.3)),
    # (e) is worse (higher loss) than (a) at 1x
    "short_loss_e": Spec("loss@1", {"a": 3.0, "e": 3.5}, ("e", 2.6)),
    # higher NIAH accuracy past 1x is better
    "niah_b_above_a": Spec("niah", {"a": 0.05, "b": 0.28}, ("b", 0.03)),
    "niah_c_below_b": Spec("niah", {"b": 0.28, "c": 0.12}, ("c", 0.30)),
    "niah_d_between": Spec("niah", {"a": 0.05, "b": 0.28, "d": 0.18}, ("d", 0.03)),
    "niah_ef_between": Spec("niah", {"a": 0.05, "b": 0.28, "e": 0.12, "f": 0.20},
                            ("f", 0.30)),
    "niah_f_above_e": Spec("niah", {"e": 0.12, "f": 0.20}, ("e", 0.28)),
    # a higher top needle score is better
    "needle_b_above_a": Spec("needle_top", {"a": 0.2, "b": 0.8}, ("a", 0.9)),
    "needle_b_highest": Spec("needle_top", {"a": 0.2, "b": 0.8, "c": 0.5, "d": 0.6, "e": 0.4,
                                            "f": 0.7}, ("e", 0.9)),
    "needle_c_below_b": Spec("needle_top", {"b": 0.8, "c": 0.5}, ("c", 0.9)),
    "needle_d_between": Spec("needle_top", {"a": 0.2, "b": 0.8, "d": 0.6}, ("d", 0.1)),
    "needle_ef_between": Spec("needle_top", {"a": 0.2, "b": 0.8, "e": 0.4, "f": 0.7},
                              ("e", 0.1)),
    "needle_f_above_e": Spec("needle_top", {"e": 0.4, "f": 0.7}, ("f", 0.3)),
}
# the size of a seed's effect (shared by every variant: paired) and of the noise, per metric
SCALE = {"pretrain_loss": 1.0, "long_loss": 1.0, "loss@1": 1.0, "theta_penalty": 0.2,
         "niah": 0.03, "needle_top": 0.1}
SEED_SHIFT = (0.0, 0.4, -0.3, 0.2, -0.1, 0.3, -0.2, 0.1, 0.25)
# 8 seeds: the fewest whose permutation test reaches the corrected levels of these one-metric
# families (2 / 2^8 = 0.0078; Holm's first step at m = 5, 0.01); below that nothing holds.
# Undecided, below a family's permutation floor (the 9 secondary needle orderings: 9 seeds at
# 0.05 / 9), the verdict is "not decidable at 8 seeds", not inconclusive
SEEDS = {"holds": 8, "contradicted": 8, "inconclusive": 8}
# per-seed R² of the learned p_n's log fit, on either side of (or around) R2_LOG_LAW = 0.9
PN_R2 = {"holds": (0.97, 0.99, 0.96, 0.98, 0.95, 0.97, 0.99, 0.96),
         "contradicted": (0.70, 0.75, 0.65, 0.72, 0.68, 0.74, 0.71, 0.66),
         "inconclusive": (0.80, 0.97, 0.85, 0.99, 0.82, 0.96, 0.84, 0.98)}
# fmt: on


def node(metric: str, value: float) -> tuple[str, dict[str, Any]]:
    """(stage, outputs) of a node that reports ``value`` for ``metric``, shaped as the stage
    writes it."""
    if metric == "pretrain_loss":
        return "pretrain", {"val_loss": value}
    if metric == "long_loss":
        return "eval_loss", {"loss_at": {"1": 3.0, LONG[0]: value, LONG[1]: value + 0.3}}
    if metric == "loss@1":
        return "eval_loss", {"loss_at": {"1": value}}
    if metric == "theta_penalty":
        # the loss at 1x with theta x50 is the same for every variant: only the rise from the
        # training theta (base) tells them apart, so the sign of the subtraction decides
        base = 3.2 - value
        return "eval_loss", {"loss_at": {"1": base + value}, "base_theta_loss_at_1x": base}
    if metric == "niah":
        # rows past 1x average to value; the 1x row is high where value is low, so that a mean
        # over every row ((1 - value) / 3) orders the variants the other way round
        means = {1: 1 - 3 * value, 2: value + 0.01, 4: value - 0.01}
        grid = [[means[m] - 0.005, means[m] + 0.005] for m in NIAH_MULTIPLES]  # two depths
        accuracy = {str(m): means[m] for m in NIAH_MULTIPLES}
        return "eval_niah", {"context_multiples": NIAH_MULTIPLES, "accuracy_grid": grid,
                             "accuracy": accuracy, "depths": [0.25, 0.75]}  # fmt: skip
    if metric == "needle_top":
        return "eval_niah", {"needle_scores": {"top_mean": value, "map_max": value + 0.1}}
    raise ValueError(metric)


def results(metric: str, table: Table) -> Results:
    """Results holding one metric's values, letter -> seed -> value."""
    inputs = {}
    for letter, by_seed in table.items():
        for seed, value in by_seed.items():
            stage, outputs = node(metric, value)
            inputs[f"{stage}/{VARIANTS[letter]}/seed{seed}"] = outputs
    return Results.from_inputs(typed(inputs), Settings("test", [0, 1, 2, 3], 128))


def case(spec: Spec, verdict: str, seeds: int) -> Table:
    """The spec's values in every seed (holds), its broken values in every seed
    (contradicted), or the two alternating by seed (inconclusive); plus a seed effect shared
    by the variants and a little noise."""
    broken = {**spec.good, spec.broken[0]: spec.broken[1]}
    scale = SCALE[spec.metric]
    table: Table = {}
    for i, letter in enumerate(spec.good):
        for seed in range(seeds):
            flip = verdict == "contradicted" or (verdict == "inconclusive" and seed % 2 == 1)
            use = broken if flip else spec.good
            noise = 0.02 * (((3 * seed + 5 * i) % 7) - 3) / 3
            table.setdefault(letter, {})[seed] = use[letter] + scale * (SEED_SHIFT[seed] + noise)
    return table


def claim(res: Results, key: str) -> Claim:
    return next(c for c in claims(res) if c.key == key)


def letters_of(ordering: str) -> list[str]:
    """The two letters of an ordering's label "x < y on metric"."""
    return ordering.split(" on ")[0].split(" < ")


def n_of(difference: str) -> int:
    return int(difference.rsplit("(n=", 1)[1].rstrip(")"))


def test_every_claim_has_a_spec() -> None:
    keys = [c.key for c in claims(results("pretrain_loss", {}))]
    assert sorted(keys) == sorted([*SPECS, "pn_log_law"])


def test_niah_cases_are_accuracies() -> None:
    for spec in (s for s in SPECS.values() if s.metric == "niah"):
        for verdict, seeds in SEEDS.items():
            for by_seed in case(spec, verdict, seeds).values():
                for value in by_seed.values():
                    grid = node("niah", value)[1]["accuracy_grid"]
                    assert all(0 <= x <= 1 for row in grid for x in row), (spec, value)


@pytest.mark.parametrize("verdict", ["holds", "contradicted", "inconclusive"])
@pytest.mark.parametrize("key", list(SPECS))
def test_claim_verdict(key: str, verdict: str) -> None:
    spec, n = SPECS[key], SEEDS[verdict]
    c = claim(results(spec.metric, case(spec, verdict, n)), key)
    assert c.letters == tuple(sorted(spec.good))  # the table names the claim's variants
    if verdict == "inconclusive" and n < c.floor:  # undecided below the floor
        assert c.verdict == UNDECIDABLE and c.shown == "not decidable at 8 seeds", c.checks
        verdict = UNDECIDABLE
    assert c.verdict == verdict, (c.value, c.checks)
    assert c.uncorrected == verdict.replace(UNDECIDABLE, "inconclusive")  # clear by either rule
    assert c.checks and all(n_of(k.difference) == n for k in c.checks)
    moved = [k.verdict for k in c.checks if spec.broken[0] in letters_of(k.ordering)]
    if verdict == "holds":
        assert all(k.verdict == "holds" for k in c.checks)
    elif verdict == "contradicted":
        assert "contradicted" in moved  # the ordering the broken value reverses
    else:
        assert "contradicted" not in [k.verdict for k in c.checks] and verdict in moved
    if spec.metric == "long_loss":  # every multiple past 1x, none at 1x
        assert {k.ordering.split(" on ")[1] for k in c.checks} == {f"loss@{m}" for m in LONG}


def test_values_of_reads_every_metric_from_the_stage_outputs() -> None:
    inputs = {
        "pretrain/a_softmax/seed0": {"val_loss": 4.25},
        "eval_loss/a_softmax/seed0": {"loss_at": {"1": 3.5, "4": 5.0},
                                      "base_theta_loss_at_1x": 3.25},
        "eval_niah/a_softmax/seed0": {
            "context_multiples": [1, 2, 4], "accuracy_grid": [[1.0, 1.0], [0.5, 0.3], [0.1, 0.1]],
            "accuracy": {"1": 1.0, "2": 0.4, "4": 0.1}, "needle_scores": {"top_mean": 0.6}},
    }  # fmt: skip
    res = Results.from_inputs(typed(inputs), Settings("test", [0], 128))
    expected = {"pretrain_loss": 4.25, "loss@1": 3.5, "loss@4": 5.0, "theta_penalty": 0.25,
                "niah": 0.25, "niah@2": 0.4, "needle_top": 0.6}  # fmt: skip
    for metric, value in expected.items():
        assert values_of(res, metric, "a_softmax") == {0: pytest.approx(value)}, metric
    assert values_of(res, "loss@20", "a_softmax") == {}
    with pytest.raises(ValueError, match="unknown claim metric"):
        values_of(res, "perplexity", "a_softmax")


def test_differences_are_paired_by_seed_not_by_position() -> None:
    """(a) lacks seed 0. By seed, (b) is 0.1 above (a) in both shared seeds: the interval holds
    (2 seeds are too few for the rule). Paired by list position ((b) seed 0 with (a) seed 1,
    ...) it would be contradicted."""
    table = {"a": {1: 0.45, 2: 0.85}, "b": {0: 0.15, 1: 0.55, 2: 0.96}}
    c = claim(results("needle_top", table), "needle_b_above_a")
    assert c.uncorrected == "holds"
    assert c.checks[0].difference.startswith("+0.105 ") and n_of(c.checks[0].difference) == 2


def test_a_contradiction_outranks_a_missing_variant() -> None:
    """(d) never ran: its ordering is n/a, but (c)'s is contradicted, and a claim with a
    contradicted ordering is contradicted whatever else is missing (the registration of
    2026-11-29); without the contradiction the claim is n/a."""
    spec = SPECS["pretrain_lower"]
    table = case(spec, "contradicted", 8)
    del table["d"]
    c = claim(results(spec.metric, table), "pretrain_lower")
    assert [k.verdict for k in c.checks] == ["holds", "contradicted", "n/a"]
    assert c.verdict == c.uncorrected == "contradicted"
    table = case(spec, "holds", 8)
    del table["d"]
    c = claim(results(spec.metric, table), "pretrain_lower")
    assert [k.verdict for k in c.checks] == ["holds", "holds", "n/a"] and c.verdict == "n/a"


def test_a_pipeline_of_exactly_a_claims_variants_tests_it() -> None:
    """A pipeline that runs (a) and (b) and nothing else tests the claims on (a) and (b)."""
    checked = claims(results("niah", case(SPECS["niah_b_above_a"], "holds", 3)))
    tested, untested = in_scope(checked, ["a_softmax", "b_ssmax"])
    assert {c.key for c in tested} == {"niah_b_above_a", "needle_b_above_a"}
    assert {c.key for c in untested} == {c.key for c in checked} - {c.key for c in tested}


@pytest.mark.parametrize("key", ["pretrain_lower", "niah_b_above_a", "needle_b_above_a"])
def test_a_nan_seed_is_left_out(key: str) -> None:
    """One variant's seed 3 is NaN: it leaves that variant's orderings with 8 seeds, whose
    values still decide the verdict (a NaN kept would make the interval NaN: inconclusive)."""
    spec = SPECS[key]
    table = case(spec, "holds", 9)
    gone = next(iter(spec.good))
    table[gone][3] = math.nan
    c = claim(results(spec.metric, table), key)
    assert c.verdict == "holds"
    for k in c.checks:
        assert n_of(k.difference) == (8 if gone in letters_of(k.ordering) else 9), k


def log_law(r2: float, seed: int, size: int = 64, a1: float = 0.03, a2: float = 0.4) -> np.ndarray:
    """p_n, n = 1..size: a1 log n + a2 plus noise orthogonal to (log n, 1) and scaled so that
    the fit over n >= 2 recovers a1, a2 with R² = r2. p_1 keeps its init (no gradient)."""
    x = np.log(np.arange(2, size + 1, dtype=np.float64))
    design = np.stack([x, np.ones_like(x)], axis=1)
    noise = np.random.default_rng(seed).normal(size=x.size)
    noise -= design @ np.linalg.lstsq(design, noise, rcond=None)[0]
    signal = (a1**2) * ((x - x.mean()) ** 2).sum()
    noise *= math.sqrt(signal * (1 - r2) / r2 / (noise**2).sum())
    return np.concatenate([[1.0], a1 * x + a2 + noise])


def pn_results(folder: Path, p_n: dict[int, np.ndarray]) -> Results:
    """The rationale model's pretrain outputs, each pointing at a state dict with its p_n."""
    inputs = {}
    for seed, p in p_n.items():
        path = folder / f"pn_seed{seed}.pt"
        torch.save({"p_n": torch.tensor(p, dtype=torch.float32), "s": torch.ones(2)}, path)
        inputs[f"pretrain/{VARIANTS['pn']}/seed{seed}"] = {"weights": str(path), "val_loss": 4.0}
    return Results.from_inputs(typed(inputs), Settings("test", list(p_n), 128))


@pytest.mark.parametrize("verdict", ["holds", "contradicted", "inconclusive"])
def test_pn_log_law_against_its_threshold(tmp_path: Path, verdict: str) -> None:
    r2 = PN_R2[verdict]
    res = pn_results(tmp_path, {seed: log_law(r, seed) for seed, r in enumerate(r2)})
    fits = pn_fits(res)
    assert sorted(fits) == list(range(len(r2)))
    for seed, (p, fit) in fits.items():
        # numpy's own R² of a straight line in log n (n >= 2), on the values as saved
        own = np.corrcoef(np.log(np.arange(2, p.size + 1)), p[1:])[0, 1] ** 2
        assert fit.r2 == pytest.approx(own, abs=1e-6)
        assert fit.r2 == pytest.approx(r2[seed], abs=1e-4)
        assert (fit.a1, fit.a2) == (pytest.approx(0.03, abs=1e-4), pytest.approx(0.4, abs=1e-4))
    sides = {"holds": min(r2) > R2_LOG_LAW, "contradicted": 0 < max(r2) < R2_LOG_LAW,
             "inconclusive": min(r2) < R2_LOG_LAW < max(r2)}  # fmt: skip
    assert sides[verdict]  # the case is on the side it says
    c = claim(res, "pn_log_law")
    assert c.verdict == c.uncorrected == verdict, c.checks
    assert c.letters == ("pn",) and n_of(c.checks[0].difference) == len(r2)


def test_constant_pn_has_no_log_law(tmp_path: Path) -> None:
    """p_n flat for n >= 2 (p_1 at its init does not count): R² undefined, n/a."""
    flat = np.concatenate([[1.0], np.full(63, 0.5)])
    res = pn_results(tmp_path, {0: flat, 1: flat, 2: flat})
    assert all(math.isnan(fit.r2) for _, fit in pn_fits(res).values())
    c = claim(res, "pn_log_law")
    assert c.verdict == "n/a" and "constant" in c.value and not c.checks


def test_no_pn_weights_is_na() -> None:
    assert claim(results("pretrain_loss", {}), "pn_log_law").verdict == "n/a"
