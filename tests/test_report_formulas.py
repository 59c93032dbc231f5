"""Figs. 1-3 numbers against the equations written out, and the p_n log fit on exact data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ssmax.report.formulas import fig1_max_output, fig3_ramp, fig3_transformed
from ssmax.verdicts.pn_fit import fit_log


def softmax(z: np.ndarray) -> np.ndarray:  # Eq. 1, plainly
    e = np.exp(z - z.max())
    return e / e.sum()


@pytest.mark.parametrize("n", [2, 3, 10, 257, 4096])
def test_fig1_is_the_largest_output_of_eq1_and_eq2(n: int) -> None:
    z = np.full(n, -2.0)
    z[-1] = 3.0
    assert fig1_max_output(np.array([n]), None)[0] == pytest.approx(softmax(z).max(), rel=1e-12)
    ssmax = softmax(0.43 * math.log(n) * z)  # Eq. 2: n^(s z_i) / sum_j n^(s z_j)
    assert fig1_max_output(np.array([n]), 0.43)[0] == pytest.approx(ssmax.max(), rel=1e-12)
    # Eq. 7 in closed form
    assert fig1_max_output(np.array([n]), 0.43)[0] == pytest.approx(
        1 / (1 + (n - 1) * n ** (-0.43 * 5)), rel=1e-12
    )


def test_fig1_limits() -> None:
    big = np.array([1e6])
    assert fig1_max_output(np.array([1.0]), None)[0] == 1.0
    assert fig1_max_output(big, None)[0] < 1e-3  # attention fading
    assert fig1_max_output(big, 0.43)[0] > 0.999  # 5 s > 1: SSMax tends to 1


@pytest.mark.parametrize("n", [3, 10, 1000])
@pytest.mark.parametrize("s", [None, 0.43, 1.0])
@pytest.mark.parametrize("z_max", [-1.0, 0.5, 2.0, 7.5])
def test_fig3_is_the_output_at_z_max(n: int, s: float | None, z_max: float) -> None:
    ramp = fig3_ramp(n)
    assert ramp.size == n - 1 and ramp[0] == 0 and ramp[-1] == 1
    assert ramp[1] == pytest.approx(1 / (n - 2))
    z = np.append(ramp, z_max)
    scale = 1.0 if s is None else s * math.log(n)
    expected = softmax(scale * z)[-1]
    assert fig3_transformed(np.array([z_max]), n, s)[0] == pytest.approx(expected, rel=1e-10)


def test_fig3_ssmax_threshold_does_not_move_with_n() -> None:
    """Sec. 2.2: under SSMax z_max takes the attention once it exceeds the rest by ~1/s."""
    for n in (100, 10_000, 1_000_000):
        assert fig3_transformed(np.array([1 + 2 / 0.5]), n, 0.5)[0] > 0.9
        assert fig3_transformed(np.array([1.0]), n, 0.5)[0] < 0.1
    assert fig3_transformed(np.array([5.0]), 1_000_000, None)[0] < 0.01  # softmax: not yet


def test_log_fit_recovers_a1_a2_exactly() -> None:
    n = np.arange(1, 1025)
    p = 0.0283 * np.log(n) + 0.394
    p[0] = 1.0  # p_1 keeps its init (no gradient): left out of the fit
    fit = fit_log(p)
    assert fit.a1 == pytest.approx(0.0283, abs=1e-12)
    assert fit.a2 == pytest.approx(0.394, abs=1e-12)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    assert fit(np.array([1024]))[0] == pytest.approx(0.0283 * math.log(1024) + 0.394)
    assert fit_log(p, n_min=1).r2 < 1.0  # with p_1 the law is no longer exact


def test_log_fit_r2_of_noise_and_constant() -> None:
    rng = np.random.default_rng(0)
    n = np.arange(1, 513)
    noisy = fit_log(0.05 * np.log(n) + 0.3 + rng.normal(0, 0.01, n.size))
    assert 0.9 < noisy.r2 < 1.0 and noisy.a1 == pytest.approx(0.05, abs=0.005)
    assert math.isnan(fit_log(np.ones(64)).r2)  # nothing to explain: undefined, not 1
    with pytest.raises(ValueError):
        fit_log([1.0, 2.0])
