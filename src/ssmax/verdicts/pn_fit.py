"""The rationale model's learned p_n and its log fit (Sec. 2.1): the claim pn_log_law decides on
the fit's R² (verdicts.claims), Fig. 2 draws it (report.figures).

Plain numpy in float64.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ssmax.config.variants import learns_p_n
from ssmax.preflight.weights import read_weights
from ssmax.verdicts.results import Results


@dataclass
class LogFit:
    """p_n ~ a1 * log n + a2 by least squares, over the n the fit used."""

    a1: float
    a2: float
    r2: float  # nan when the values do not vary
    n_min: int

    def __call__(self, n: np.ndarray) -> np.ndarray:
        return self.a1 * np.log(np.asarray(n, dtype=np.float64)) + self.a2


def fit_log(p: Sequence[float], n_min: int = 2) -> LogFit:
    """Fit p[n-1] (n = 1..N) for n >= n_min. Default n_min = 2: p_1 gets no gradient (a
    softmax over one key is 1 whatever its multiplier), so it stays at its initial value."""
    values = np.asarray(p, dtype=np.float64)
    n = np.arange(1, values.size + 1, dtype=np.float64)[n_min - 1 :]
    y = values[n_min - 1 :]
    if y.size < 2:
        raise ValueError("the log fit needs at least two values")
    design = np.stack([np.log(n), np.ones_like(n)], axis=1)
    (a1, a2), *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ np.array([a1, a2])
    total = ((y - y.mean()) ** 2).sum()
    r2 = float(1.0 - (residual**2).sum() / total) if total > 0 else float("nan")
    return LogFit(float(a1), float(a2), r2, n_min)


def learned_p_n(weights: str | Path | None) -> np.ndarray | None:
    """The rationale model's learned p_n (n = 1..N) from its saved state dict."""
    if not weights or not Path(weights).exists():
        return None

    state = read_weights(weights, key="weights")
    p_n = state.get("p_n")
    return None if p_n is None else p_n.double().numpy()


def pn_fits(results: Results) -> dict[int, tuple[np.ndarray, LogFit]]:
    """seed -> (learned p_n, its log fit), for every rationale model that has weights."""
    out = {}
    rationale = [v for v in results.variants("pretrain") if learns_p_n(v)]
    for variant in rationale[:1]:
        for seed, outputs in results.get("pretrain", variant).items():
            p = learned_p_n(outputs.weights)
            if p is not None and p.size >= 3:
                out[seed] = (p, fit_log(p))
    return out
