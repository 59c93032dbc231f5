"""The paper's claims, each checked against the gathered results.

A claim names the variants it compares; it holds when the means over seeds order as the paper
says (strictly: ties do not hold). Missing variants or numbers give "n/a". Thresholds are the
paper's wording, fixed here before any run; never tune them towards a verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ssmax.report.gather import Results

SHORT = {
    "a_softmax": "a", "b_ssmax": "b", "c_ssmax_no_scale": "c", "d_ssmax_bias": "d",
    "e_swap_after_pretrain": "e", "f_switch_during_pretrain": "f",
}  # fmt: skip
VAR = {v: k for k, v in SHORT.items()}
R2_LOG_LAW = 0.9  # "p_n closely follows a log law"


@dataclass
class Claim:
    key: str
    text: str  # what the paper says, and where
    value: str  # our numbers: mean ± std over seeds
    holds: str  # yes / no / n/a


def _stat(values: list[float]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    return f"{mean:.5g}" if len(values) == 1 else f"{mean:.5g} ± {statistics.stdev(values):.2g}"


def values_of(results: Results, metric: str, variant: str) -> list[float]:
    """One value per seed: pretrain_loss, niah, needle_top, or loss@<k>."""
    out = []
    if metric == "pretrain_loss":
        out = [o.get("val_loss") for o in results.get("pretrain", variant).values()]
    elif metric.startswith("loss@"):
        key = metric.removeprefix("loss@")
        out = [o.get("loss_at", {}).get(key) for o in results.get("eval_loss", variant).values()]
    elif metric == "niah":
        grids = [o.get("accuracy_grid") for o in results.get("eval_niah", variant).values()]
        out = [float(np.mean(g)) for g in grids if g]
    elif metric == "needle_top":
        runs = results.get("eval_niah", variant).values()
        out = [(o.get("needle_scores") or {}).get("top_mean") for o in runs]
    return [float(v) for v in out if v is not None and not math.isnan(float(v))]


def _compare(
    results: Results, key: str, text: str, metrics: list[str], letters: str,
    order: Callable[[dict[str, float]], bool],
) -> Claim:  # fmt: skip
    """Means per (metric, variant letter); holds = order(means keyed "<letter>" or
    "<letter>@<metric>")."""
    means, shown, missing = {}, [], []
    for metric in metrics:
        for letter in letters:
            values = values_of(results, metric, VAR[letter])
            name = letter if len(metrics) == 1 else f"{letter}@{metric.removeprefix('loss@')}x"
            if not values:
                missing.append(name)
                continue
            means[name] = statistics.fmean(values)
            shown.append(f"({name}) {_stat(values)}")
    value = "; ".join(shown) or "-"
    if missing or not means:
        return Claim(key, text, value + f" [missing: {', '.join(missing)}]", "n/a")
    return Claim(key, text, value, "yes" if order(means) else "no")


def _long_multiples(results: Results) -> list[str]:
    """loss@k for the evaluated multiples k > 1 (past the training length)."""
    ks = {k for runs in results.nodes.get("eval_loss", {}).values() for o in runs.values()
          for k in o.get("loss_at", {})}  # fmt: skip
    return [f"loss@{k}" for k in sorted(ks, key=float) if float(k) > 1]


def _at_every(means: dict[str, float], test: Callable[[Callable[[str], float]], bool]) -> bool:
    suffixes = {name.partition("@")[2] for name in means}
    return all(test(lambda letter, s=s: means[f"{letter}@{s}"]) for s in suffixes)


def claims(results: Results) -> list[Claim]:
    r, long = results, _long_multiples(results)
    pre, niah, needle = ["pretrain_loss"], ["niah"], ["needle_top"]
    out = [
        _compare(r, "pretrain_lower", "Sec. 3.1, Fig. 4: (b), (c), (d) reach a lower final "
                 "pretraining loss (here: validation loss) than (a)", pre, "abcd",
                 lambda m: max(m["b"], m["c"], m["d"]) < m["a"]),
        _compare(r, "pretrain_bias_lowest", "Sec. 3.1: (d), with the bias, has the lowest "
                 "pretraining loss of (a)-(d)", pre, "abcd",
                 lambda m: m["d"] < min(m["a"], m["b"], m["c"])),
        _compare(r, "long_loss_bc", "Sec. 3.2, Fig. 5: past the training length (theta x50) "
                 "(b) and (c) keep a lower loss than (a), at every evaluated multiple", long,
                 "abc", lambda m: _at_every(m, lambda v: max(v("b"), v("c")) < v("a"))),
        _compare(r, "long_loss_d_between", "Sec. 3.2: past the training length (d) lies "
                 "between (a) and (b)", long, "abd",
                 lambda m: _at_every(m, lambda v: v("b") < v("d") < v("a"))),
        _compare(r, "niah_b_best", "Sec. 3.3, Fig. 6: (b) retrieves best (mean NIAH accuracy "
                 "over the context x depth grid) of (a)-(f)", niah, "abcdef",
                 lambda m: all(m["b"] > v for k, v in m.items() if k != "b")),
        _compare(r, "niah_cd_below_b", "Sec. 3.3: (c) and (d) retrieve worse than (b)", niah,
                 "bcd", lambda m: max(m["c"], m["d"]) < m["b"]),
        _compare(r, "niah_ef_between", "Sec. 3.3: (e) and (f) retrieve better than (a) but "
                 "worse than (b)", niah, "abef",
                 lambda m: m["a"] < min(m["e"], m["f"]) and max(m["e"], m["f"]) < m["b"]),
        _compare(r, "niah_f_above_e", "Sec. 3.3: (f) retrieves better than (e)", niah, "ef",
                 lambda m: m["f"] > m["e"]),
        _compare(r, "needle_b_above_a", "Sec. 3.4, Fig. 8: SSMax concentrates attention on "
                 "the needle: mean top needle score of (b) above (a)", needle, "ab",
                 lambda m: m["b"] > m["a"]),
        _compare(r, "needle_b_highest", "Sec. 3.4, Fig. 8: (b) has the highest mean top "
                 "needle score of (a)-(f)", needle, "abcdef",
                 lambda m: all(m["b"] > v for k, v in m.items() if k != "b")),
        pn_log_law(r),
    ]  # fmt: skip
    return out


def pn_log_law(results: Results) -> Claim:
    from ssmax.report.figures import pn_fits

    text = f"Sec. 2.1, Fig. 2: learned p_n follows a1 log n + a2 (R² >= {R2_LOG_LAW})"
    fits = pn_fits(results)
    r2 = [f.r2 for _, f in fits.values() if not math.isnan(f.r2)]
    if not r2:
        why = "no p_n" if not fits else "p_n constant: R² undefined"
        return Claim("pn_log_law", text, f"- [{why}]", "n/a")
    a1 = _stat([f.a1 for _, f in fits.values()])
    a2 = _stat([f.a2 for _, f in fits.values()])
    value = f"R² {_stat(r2)}; a1 {a1}, a2 {a2}"
    return Claim("pn_log_law", text, value, "yes" if statistics.fmean(r2) >= R2_LOG_LAW else "no")
