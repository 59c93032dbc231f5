"""The paper's closed forms (Eqs. 1, 2, 5-9) for Figs. 1 and 3 (Fig. 2's p_n log fit:
verdicts.pn_fit, a claim's metric).

Everything is in float64 numpy and works in log space, so n up to 10^6 and large z stay finite.
"""

from __future__ import annotations

import numpy as np


def _max_output(z_max: np.ndarray, log_rest: np.ndarray) -> np.ndarray:
    """exp(z_max) / (exp(z_max) + exp(log_rest)) without overflow: a logistic of the gap."""
    return 1.0 / (1.0 + np.exp(np.clip(log_rest - z_max, -700.0, 700.0)))


def fig1_max_output(
    n: np.ndarray, s: float | None, low: float = -2.0, high: float = 3.0
) -> np.ndarray:
    """Largest output for an input of size n that is ``low`` everywhere but one ``high``.

    Softmax (s None): e^high / (e^high + (n-1) e^low). SSMax (Eq. 2) is softmax of
    (s log n) z, i.e. 1 / (1 + (n-1) n^(-s (high-low))) (Eq. 7)."""
    n = np.asarray(n, dtype=np.float64)
    scale = 1.0 if s is None else s * np.log(n)
    with np.errstate(divide="ignore"):  # n = 1: log(n - 1) = -inf, output 1
        log_rest = np.log(n - 1.0) + scale * low
    return _max_output(scale * high, log_rest)


def fig3_ramp(n: int) -> np.ndarray:
    """The n - 1 other elements of Fig. 3's input: 0, 1/(n-2), ..., (n-3)/(n-2), 1."""
    if n < 3:
        raise ValueError("Fig. 3's input needs n >= 3")
    return np.linspace(0.0, 1.0, n - 1)


def fig3_transformed(z_max: np.ndarray, n: int, s: float | None) -> np.ndarray:
    """Output at z_max of softmax (s None) or SSMax for the input (ramp(n), z_max) of size n."""
    scale = 1.0 if s is None else s * np.log(n)
    scaled = scale * fig3_ramp(n)
    peak = scaled.max()
    log_rest = peak + np.log(np.exp(scaled - peak).sum())  # log-sum-exp of the others
    return _max_output(scale * np.asarray(z_max, dtype=np.float64), log_rest)
