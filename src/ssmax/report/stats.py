"""The statistics the claims rest on: the 95% interval of a mean of paired differences, how
many paired seeds would decide it (power of the two-sided paired t-test), and how likely the
same seeds trained again with fresh training noise (another machine) give the same verdict.

Plain scipy; nothing here knows a variant or a metric.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

ALPHA = 0.05  # two-sided: the 95% interval the verdicts use
POWER = 0.8  # the usual target: 4 in 5 reruns at the same effect would decide it
MAX_SEEDS = 10_000  # past this the effect is, for this experiment, no effect


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with df degrees of freedom."""
    return float(stats.t.ppf(1 - ALPHA / 2, df))


@dataclass
class Interval:
    """Mean of n values, their sample sd and the 95% t-interval [lo, hi] (nan when n < 2)."""

    n: int
    mean: float
    lo: float
    hi: float
    sd: float = math.nan

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        n = len(values)
        if n == 0:
            return cls(0, math.nan, math.nan, math.nan)
        mean = statistics.fmean(values)
        if n < 2:
            return cls(n, mean, math.nan, math.nan)
        sd = statistics.stdev(values)
        half = t975(n - 1) * sd / math.sqrt(n)
        return cls(n, mean, mean - half, mean + half, sd)

    def verdict(self, threshold: float = 0.0) -> str:
        """holds / contradicted / inconclusive for "the mean is above threshold"."""
        if self.n < 2:
            return "inconclusive" if self.n else "n/a"
        if self.lo > threshold:
            return "holds"
        if self.hi < threshold:
            return "contradicted"
        return "inconclusive"

    def seeds_needed(self, threshold: float = 0.0) -> float:
        """Paired seeds that would decide "the mean is above threshold" with power 0.8 if the
        observed effect and spread were the truth (seeds_for_power); nan below 2 values."""
        if self.n < 2:
            return math.nan
        return seeds_for_power(self.mean - threshold, self.sd)

    def rerun_keeps(self, threshold: float = 0.0) -> float:
        """The chance that the same seeds, trained again with each seed's training noise drawn
        anew, give this verdict again: what another machine or other software does to a CPU
        run (one flipped low bit moves the whole run); cautious, since a seed's data order
        stays there and its noise is redrawn only in part. Model: the true mean ~ N(mean,
        sd²/n) (flat prior, sd taken as the truth), the rerun's n values ~ N(true mean, sd²),
        decided by the same rule. Then the rerun's t statistic over sqrt(2) is noncentral t
        (n - 1 df, ncp t/sqrt(2), t this run's statistic); nan below 2 values."""
        if self.n < 2:
            return math.nan
        if self.sd == 0:
            return 1.0
        t = (self.mean - threshold) / (self.sd / math.sqrt(self.n))
        crit = t975(self.n - 1) / math.sqrt(2)
        above, below = _beyond(crit, self.n - 1, t / math.sqrt(2))
        verdict = self.verdict(threshold)
        if verdict == "holds":
            return above
        return below if verdict == "contradicted" else 1.0 - above - below

    def __str__(self) -> str:
        if self.n == 0:
            return "-"
        if self.n < 2:
            return f"{self.mean:+.4g} (1 seed)"
        return f"{self.mean:+.4g} [{self.lo:+.3g}, {self.hi:+.3g}] (n={self.n})"


def paired_t_power(effect: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided one-sample (paired) t-test at level alpha with n values whose
    true mean is ``effect`` and true sd ``sd``: the chance its interval excludes 0."""
    if n < 2:
        return 0.0
    df, crit = n - 1, float(stats.t.ppf(1 - alpha / 2, n - 1))
    if sd == 0:
        return 1.0 if effect != 0 else alpha
    upper, lower = _beyond(crit, df, abs(effect) / sd * math.sqrt(n))  # same power for -effect
    return upper + lower


def _beyond(crit: float, df: int, ncp: float) -> tuple[float, float]:
    """P(T > crit) and P(T < -crit) for T noncentral t (df, ncp)."""
    # scipy's nct is nan from |ncp| ~8 on, at any df: there the far tail is under
    # Phi(-|ncp|) < 1e-15 and counts as 0, the near one is normal's (exact there: not seen for
    # df < 10,000 and ncp < 1000). (Taking the normal approximation everywhere ignored df: 2
    # seeds at effect 11 sd had power 0.998 instead of Student's 0.778.)
    upper, lower = float(stats.nct.sf(crit, df, ncp)), float(stats.nct.cdf(-crit, df, ncp))
    if math.isnan(upper):
        upper = float(stats.norm.sf(crit - ncp)) if ncp > 0 else 0.0
    if math.isnan(lower):
        lower = float(stats.norm.cdf(-crit - ncp)) if ncp < 0 else 0.0
    return upper, lower


def seeds_for_power(effect: float, sd: float, power: float = POWER) -> float:
    """The fewest paired seeds n >= 2 whose two-sided paired t-test reaches ``power`` at this
    effect and spread; inf where no count up to MAX_SEEDS does (an effect of 0, or nan)."""
    if math.isnan(effect) or math.isnan(sd) or effect == 0:
        return math.inf
    if sd == 0:
        return 2
    lo, hi = 2, MAX_SEEDS
    if paired_t_power(effect, sd, hi) < power:
        return math.inf
    while lo < hi:  # power grows with n: bisect for the first n that reaches it
        mid = (lo + hi) // 2
        if paired_t_power(effect, sd, mid) >= power:
            hi = mid
        else:
            lo = mid + 1
    return lo
