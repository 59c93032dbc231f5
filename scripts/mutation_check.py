"""Mutation check of the code a wrong result would slip through: the claims and their statistics,
the NIAH scoring, the node fingerprint (issue 35). Each seeded bug below is put, one at a time,
into a copy of the tree, and the target's tests run on that copy: a bug they miss "survives".

    python scripts/mutation_check.py                     # every target (make mutation-check)
    python scripts/mutation_check.py --target claims     # one target; --only NAME: one bug
    python scripts/mutation_check.py --list              # the bugs, not run

A named list, not mutmut: mutmut 3.8 leaves decorated functions alone (the fingerprint's
stage_code, _imported, module_file and code_hash are all @cache), never touches module-level
constants (NO_RESULT, SFT_KEYS) and made 1061 mutants of claims.py and stats.py alone, at ~4 s
each on 2 cores, most of them in the claims' text. These bugs are the ones that would give a
wrong verdict or a stale cache, several of them the survivors of a bounded mutmut run.

The copy (src, tests, conf, pipelines, bench, data, docs, pyproject.toml) lies in a temp folder;
its src comes first on PYTHONPATH (ssmax is a namespace package: the first portion holding a module
wins), and a plugin checks after every run that each ssmax and tests module was loaded from the
copy. Exit 0: every bug killed, or survived with a reason written beside it (`why`); 1: a bug
survived unexplained; 2: the check itself is broken (a bug's text is gone from the source, the
tests fail on the unmutated copy, a module was imported from outside the copy).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# docs: the published files (docs/results/) that the replicate target's tests read
COPIED = ("src", "tests", "conf", "pipelines", "bench", "data", "docs", "pyproject.toml")


@dataclass(frozen=True)
class Bug:
    name: str
    file: str  # relative to src/ssmax
    old: str  # exact text, once in the file
    new: str
    why: str = ""  # a survivor's reason: equivalent, or harmless, and why no test need see it


@dataclass(frozen=True)
class Target:
    tests: tuple[str, ...]  # pytest arguments: files, node ids, -k/-m/--deselect
    bugs: tuple[Bug, ...]


CLAIMS = (
    # the bugs
    Bug("above-swaps-low-and-high", "verdicts/claims.py",
        "return [Ordering(metric, lo, high) for lo in lows]",
        "return [Ordering(metric, high, lo) for lo in lows]"),
    Bug("theta-penalty-sign-flipped", "verdicts/metrics.py",
        "return None if base is None or at is None else at - base",
        "return None if base is None or at is None else base - at"),
    Bug("niah-claim-over-every-multiple", "verdicts/metrics.py",
        "lambda o: o.mean_accuracy(beyond=1)", "lambda o: o.mean_accuracy(beyond=None)"),
    Bug("pairs-by-list-position-not-seed", "verdicts/claims.py",
        "d = {s: high[s] - low[s] for s in seeds}",
        "d = dict(zip(seeds, [h - x for h, x in zip(high.values(), low.values())]))"),
    Bug("pn-law-judged-against-0", "verdicts/claims.py",
        "verdict = interval.verdict(R2_LOG_LAW)", "verdict = interval.verdict()"),
    # the interval and the verdict rule
    Bug("t-quantile-df-off-by-one", "verdicts/stats.py",
        "half = t975(n - 1) * sd / math.sqrt(n)", "half = t975(n) * sd / math.sqrt(n)"),
    Bug("population-sd", "verdicts/stats.py",
        "sd = statistics.stdev(values)", "sd = statistics.pstdev(values)"),
    Bug("holds-on-upper-bound", "verdicts/stats.py",
        "if self.lo > threshold:", "if self.hi > threshold:"),
    Bug("threshold-sign-flipped", "verdicts/stats.py",
        "if self.lo > threshold:", "if self.lo > -threshold:"),
    Bug("no-seeds-inconclusive-not-na", "verdicts/stats.py",
        'return "inconclusive" if self.n else "n/a"', 'return "inconclusive"'),
    Bug("decide-na-before-contradicted", "verdicts/claims.py",
        'if "contradicted" in verdicts:\n        return "contradicted"\n    if verdicts and all(',
        'if "n/a" in verdicts:\n        return "n/a"\n    if "contradicted" in verdicts:\n'
        '        return "contradicted"\n    if verdicts and all('),
    Bug("decide-inconclusive-before-not-decidable", "verdicts/claims.py",
        'return UNDECIDABLE if UNDECIDABLE in verdicts else "inconclusive"',
        'return "inconclusive" if "inconclusive" in verdicts else UNDECIDABLE'),
    Bug("below-the-floor-inconclusive", "verdicts/multiplicity.py",
        'return (UNDECIDABLE if n < floor else "inconclusive"), note',
        'return "inconclusive", note'),
    Bug("floor-off-by-one", "verdicts/multiplicity.py",
        'return (UNDECIDABLE if n < floor else "inconclusive"), note',
        'return (UNDECIDABLE if n <= floor else "inconclusive"), note'),
    Bug("floor-of-an-uncorrected-level", "verdicts/multiplicity.py",
        "return permutation_floor(ALPHA / max(m, 1))", "return permutation_floor(ALPHA)"),
    Bug("one-seed-inconclusive", "verdicts/claims.py",
        'self.verdict = UNDECIDABLE if values else "n/a"',
        'self.verdict = "inconclusive" if values else "n/a"'),
    Bug("loo-flips-between-undecided-states", "verdicts/multiplicity.py",
        "if decision(other.verdict if other else UNDECIDABLE) != decision(t.verdict):",
        "if (other.verdict if other else UNDECIDABLE) != t.verdict:"),
    Bug("decide-any-holds", "verdicts/claims.py",
        'all(v == "holds" for v in verdicts)', 'any(v == "holds" for v in verdicts)'),
    Bug("nan-seed-kept", "verdicts/metrics.py",
        "if v is not None and not math.isnan(float(v)):", "if v is not None:"),
    Bug("below-swaps-low-and-high", "verdicts/claims.py",
        "return [Ordering(metric, low, h) for h in highs]",
        "return [Ordering(metric, h, low) for h in highs]"),
    Bug("long-loss-counts-1x", "verdicts/claims.py",
        "if float(k) > 1]", "if float(k) >= 1]"),
    Bug("in-scope-needs-a-spare-variant", "verdicts/claims.py",
        "[c for c in checked if set(c.letters) <= letters],",
        "[c for c in checked if set(c.letters) < letters],"),
    # the seeds a decision would take (stats.seeds_for_power, paired_t_power)
    Bug("seeds-for-power-off-by-one", "verdicts/stats.py",
        "            lo = mid + 1\n    return lo", "            lo = mid + 1\n    return lo + 1"),
    Bug("seeds-for-power-starts-at-3", "verdicts/stats.py",
        "lo, hi = 2, MAX_SEEDS", "lo, hi = 3, MAX_SEEDS"),
    Bug("power-df-off-by-one", "verdicts/stats.py",
        "df, crit = n - 1, float(", "df, crit = n - 2, float("),
    Bug("power-of-2-seeds-is-0", "verdicts/stats.py",
        "    if n < 2:\n        return 0.0", "    if n < 3:\n        return 0.0"),
    Bug("power-without-spread-is-alpha", "verdicts/stats.py",
        "return 1.0 if effect != 0 else alpha", "return alpha"),
    Bug("power-normal-where-nct-is-nan", "verdicts/stats.py",
        "    if math.isnan(lower):\n        lower = float(stats.norm.cdf(",
        "    if math.isnan(lower):\n        upper, lower = float(stats.norm.sf(crit - ncp)), 0.0\n"
        "        lower = float(stats.norm.cdf("),
    Bug("power-lower-tail-dropped", "verdicts/stats.py",
        "    return upper + lower\n", "    return upper\n"),
    Bug("power-of-a-negative-effect-not-mirrored", "verdicts/stats.py",
        "_beyond(crit, df, abs(effect) / sd * math.sqrt(n))",
        "_beyond(crit, df, effect / sd * math.sqrt(n))",
        why="equivalent: at -ncp the two tails swap and add up to the same power, and _beyond's "
        "fallbacks where scipy's nct is nan are mirrored; abs() states the symmetry"),
    Bug("rerun-decided-as-this-run", "verdicts/stats.py",
        "crit = t975(self.n - 1) / math.sqrt(2)", "crit = t975(self.n - 1)"),
    Bug("rerun-noise-not-drawn-twice", "verdicts/stats.py",
        "_beyond(crit, self.n - 1, t / math.sqrt(2))", "_beyond(crit, self.n - 1, t)"),
    Bug("rerun-holds-from-the-wrong-tail", "verdicts/stats.py",
        "        if verdict == \"holds\":\n            return above",
        "        if verdict == \"holds\":\n            return below"),
    Bug("rerun-inconclusive-always-repeats", "verdicts/stats.py",
        "else 1.0 - above - below", "else 1.0"),
    Bug("claim-rerun-bound-from-the-surest", "verdicts/claims.py",
        "return min(c.rerun_keeps for c in self.checks)",
        "return max(c.rerun_keeps for c in self.checks)"),
    Bug("claim-rerun-bound-counts-open-orderings", "verdicts/claims.py",
        'return max(c.rerun_keeps for c in self.checks if c.uncorrected == "contradicted")',
        "return max(c.rerun_keeps for c in self.checks)"),
    # the rule of issue 42: Holm's step order, the permutation's flips, leave-one-out's seed,
    # the families, the two tests' agreement
    Bug("holm-steps-up-from-1", "verdicts/stats.py",
        "min(1.0, (m - rank) * p[i])", "min(1.0, (rank + 1) * p[i])"),
    Bug("holm-sorted-descending", "verdicts/stats.py",
        "sorted(range(m), key=lambda k: p[k])", "sorted(range(m), key=lambda k: -p[k])"),
    Bug("holm-not-monotone", "verdicts/stats.py",
        "running = max(running, min(1.0, (m - rank) * p[i]))",
        "running = min(1.0, (m - rank) * p[i])"),
    Bug("holm-is-bonferroni", "verdicts/stats.py",
        "min(1.0, (m - rank) * p[i])", "min(1.0, m * p[i])"),
    Bug("permutation-one-sided", "verdicts/stats.py",
        "min(below, above) * 2", "above"),
    Bug("permutation-flips-sampled", "verdicts/stats.py",
        "if n <= EXACT_UP_TO:", "if n <= 1:"),
    Bug("permutation-flips-one-seed-fewer", "verdicts/stats.py",
        "x = np.array(values)", "x = np.array(values[1:])"),
    Bug("permutation-floor-one-sided", "verdicts/stats.py",
        "while 2.0 / 2**n > level:", "while 1.0 / 2**n > level:"),
    Bug("loo-leaves-out-the-first-seed", "verdicts/multiplicity.py",
        "left = judge(without(families, seed))", "left = judge(without(families, seeds[0]))"),
    Bug("loo-names-the-next-seed", "verdicts/multiplicity.py",
        "t.flips.append(seed)", "t.flips.append(seed + 1)"),
    Bug("loo-keeps-the-seed", "verdicts/multiplicity.py",
        "for s, d in diffs.items() if s != seed}", "for s, d in diffs.items()}"),
    Bug("either-test-decides", "verdicts/multiplicity.py",
        "if by_t and by_perm:", "if by_t or by_perm:"),
    Bug("no-correction", "verdicts/multiplicity.py",
        "adj_t, adj_perm = correct(raw_t), correct(raw_perm)",
        "adj_t, adj_perm = raw_t, raw_perm"),
    Bug("primary-family-by-fdr", "verdicts/multiplicity.py",
        '"primary": holm,', '"primary": benjamini_hochberg,'),
    Bug("families-swapped", "verdicts/claims.py",
        'return "primary" if c.key in PRIMARY else "secondary"',
        'return "secondary" if c.key in PRIMARY else "primary"'),
    Bug("seeds-to-decide-uncorrected", "verdicts/claims.py",
        "level = ALPHA / max(m, 1)", "level = ALPHA"),
    Bug("outliers-on-one-side", "verdicts/claims.py",
        "if abs(x) > OUTLIER_Z]", "if x > OUTLIER_Z]"),
    Bug("pn-differences-against-0", "verdicts/claims.py",
        "d = {s: r - R2_LOG_LAW for s, r in r2.items()}", "d = dict(r2)"),
    Bug("t-test-one-sided", "verdicts/stats.py",
        "stats.ttest_1samp(values, 0.0).pvalue",
        'stats.ttest_1samp(values, 0.0, alternative="greater").pvalue'),
    Bug("power-never-out-of-reach", "verdicts/stats.py",
        "if paired_t_power(effect, sd, hi, alpha) < power:",
        "if paired_t_power(effect, sd, hi, alpha) <= power:",
        why="equivalent: differs only where the power at MAX_SEEDS equals 0.8 exactly, a float "
        "no effect and spread give but by construction"),
)  # fmt: skip

# a replication judged on its own pairs (verdicts.replicate; the registration of 2026-11-29)
REPLICATE = (
    Bug("replication-judged-in-the-published-table", "verdicts/replicate.py",
        "own = judged(res, set(other))",
        "own = judged(Results(pub.settings, {}, table={**(pub.table or {}), **other}), "
        "set(pub.table or {}))"),
    Bug("replication-judges-claims-it-lacks-variants-of", "verdicts/replicate.py",
        "return apply_rule([c for c in paper_claims(res) if set(c.letters) <= letters])",
        "return apply_rule([c for c in paper_claims(res) if set(c.letters) & letters])"),
    Bug("replication-counts-undecidable-orderings", "verdicts/replicate.py",
        "return self.published.verdict not in UNDECIDED and self.other.verdict not in UNDECIDED",
        "return True"),
    Bug("replication-ordering-of-its-last-claim", "verdicts/replicate.py",
        "            if k.ordering not in again:  # each ordering once: its first claim's family\n",
        "            if True:\n"),
    Bug("replication-seeds-of-the-published-run", "verdicts/replicate.py",
        "    return Results(settings, {}, table=other)",
        "    return Results(settings, {}, table={v: {m: {s: x for s, x in by.items() if s in "
        "pub.settings.seeds} for m, by in ms.items()} for v, ms in other.items()})"),
    Bug("overlap-of-one-side", "verdicts/replicate.py",
        "return p.lo <= o.hi and o.lo <= p.hi", "return p.lo <= o.hi"),
)  # fmt: skip

# a registered run judged against its registration (registration.judge; issue 58)
REGISTRATION = (
    Bug("interim-run-judged", "registration/judge.py",
        "        if run.complete:\n", "        if run.records:\n"),
    Bug("node-commit-not-checked", "registration/judge.py",
        'if run.name == "cpu" and commits != {reg.code_commit}:', "if False:"),
    Bug("edited-registration-not-checked", "registration/judge.py",
        "if first_committed(reg.path) != reg.path.read_text():", "if False:"),
    Bug("unregistered-seed-not-checked", "registration/judge.py",
        '        out += [f"seeds not registered: {sorted(extra)}"] if extra else []\n', ""),
    Bug("skill-bound-inclusive-the-wrong-way", "registration/judge.py",
        "value >= SKILL_AT_LEAST", "value > SKILL_AT_LEAST + 0.2"),
    Bug("failed-seed-dropped-from-the-verdict", "registration/judge.py",
        "-> list[str]:\n    checked = judged(run)\n",
        "-> list[str]:\n    checked = judged(run, tuple(invalid_seeds(run)))\n"),
    Bug("spare-not-taken-for-a-failed-seed", "verdicts/registered.py",
        "            seed = spares.pop(0)\n", "            break\n"),
    Bug("registered-family-not-checked", "registration/families.py",
        "if listed is not None and formed != set(listed):", "if False:"),
    Bug("readme-calls-a-mismatched-run-confirmatory", "registration/judge.py",
        'kind = "exploratory: it does not match its registration" if differs else "confirmatory"',
        'kind = "confirmatory"'),
    Bug("design-criterion-per-seed-not-the-mean", "registration/judge.py",
        '("yes" if mean >= SKILL_AT_LEAST', '("yes" if min(by.values()) >= SKILL_AT_LEAST'),
)  # fmt: skip

NIAH = (
    Bug("full-grid-counts-first-digit", "evals/niah.py",
        'ok = {"full": ("full",),', 'ok = {"full": ("full", "first_digit"),'),
    Bug("loose-grid-leaves-out-full", "evals/niah.py",
        '"first_digit": ("full", "first_digit")}', '"first_digit": ("first_digit",)}'),
    Bug("longer-number-not-full", "evals/niah.py",
        "if match.group().startswith(number):", "if match.group() == number:"),
    Bug("full-on-a-shorter-number", "evals/niah.py",
        "if match.group().startswith(number):", "if number.startswith(match.group()):"),
    Bug("full-on-the-number-anywhere", "evals/niah.py",
        "if match.group().startswith(number):", "if number in answer:"),
    Bug("first-digit-of-the-answer-not-its-number", "evals/niah.py",
        "match.group()[0] == number[0]", "answer.strip()[:1] == number[0]"),
    Bug("last-digit-not-first", "evals/niah.py",
        "match.group()[0] == number[0]", "match.group()[-1] == number[-1]"),
    Bug("grid-rows-in-arrival-order", "evals/niah.py",
        "contexts = sorted({r.context for r in records})",
        "contexts = list(dict.fromkeys(r.context for r in records))"),
    Bug("grid-over-all-records", "evals/niah.py",
        "return contexts, depths, hits / total", "return contexts, depths, hits / len(records)"),
    Bug("unmeasured-cell-is-0", "evals/niah.py",
        "return contexts, depths, hits / total",
        "return contexts, depths, (hits / total).nan_to_num(0.0)"),
    Bug("accuracy-best-depth-not-mean", "stages/eval_niah.py",
        "str(m): row.mean().item()", "str(m): row.max().item()"),
    Bug("multiple-floored", "stages/eval_niah.py",
        "multiples = [c / train_len for c in contexts]",
        "multiples = [c // train_len for c in contexts]"),
    Bug("multiple-named-as-float", "stages/eval_niah.py",
        "multiples = [int(m) if m.is_integer() else m for m in multiples]",
        "multiples = [float(m) for m in multiples]"),
    Bug("full-and-loose-keys-swapped", "stages/eval_niah.py",
        'key = "accuracy" if level == "full" else "first_digit_accuracy"',
        'key = "accuracy" if level != "full" else "first_digit_accuracy"'),
    Bug("niah-claim-counts-1x", "stages/eval_niah.py",
        "if beyond is None or m > beyond]", "if beyond is None or m >= beyond]"),
    Bug("niah-mean-of-no-rows-is-nan", "stages/eval_niah.py",
        "return float(np.mean(rows)) if rows else None", "return float(np.mean(rows))"),
    Bug("niah-mean-truncates-a-short-grid", "stages/eval_niah.py",
        "for m, r in zip(multiples, grid, strict=True)",
        "for m, r in zip(multiples, grid, strict=False)"),
    Bug("niah-mean-without-a-grid", "stages/eval_niah.py",
        "if not grid or not multiples:", "if not grid and not multiples:"),
)  # fmt: skip

FINGERPRINT = (
    # the bugs
    Bug("fingerprint-drops-code", "pipeline/fingerprint.py",
        '"code": code_hash(stage_code(module)),', '"code": None,'),
    Bug("fingerprint-drops-data", "pipeline/fingerprint.py",
        '"data": data_manifest(cfg, sft="data" in keys)\n', '"data": None\n'),
    Bug("code-skips-imports-inside-functions", "pipeline/stage_code.py",
        "        for child in ast.iter_child_nodes(node):\n            visit(child)\n\n    visit(",
        "        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):\n"
        "            for child in ast.iter_child_nodes(node):\n                visit(child)\n\n"
        "    visit("),
    Bug("no-result-covers-a-results-module", "pipeline/stage_code.py",
        '"stages/costing.py")', '"stages/costing.py", "evals/niah.py")'),
    Bug("no-result-covers-weights", "pipeline/stage_code.py",
        '"stages/costing.py")', '"stages/costing.py", "preflight/weights.py")'),
    Bug("no-result-covers-all-of-tracking", "pipeline/stage_code.py",
        '"tracking/spool.py", "tracking/sync.py",', '"tracking", "tracking/sync.py",'),
    # more of the key
    Bug("fingerprint-drops-inputs", "pipeline/fingerprint.py",
        '"inputs": input_fingerprints,', '"inputs": [],'),
    Bug("fingerprint-drops-config", "pipeline/fingerprint.py",
        '"config": select(cfg, keys),', '"config": select(cfg, keys[:1]),'),
    Bug("code-hash-of-names-only", "pipeline/fingerprint.py",
        "            digest.update(file.read_bytes())\n", ""),
    Bug("pretraining-drops-its-shards", "pipeline/fingerprint.py",
        'if spec.trains and "data:lm" in keys:', 'if spec.trains and "data" in keys:'),
    Bug("local-file-by-size-not-mtime", "data/identity.py",
        "out.append([path, st.st_size, st.st_mtime_ns])", "out.append([path, st.st_size])"),
    Bug("local-file-by-path-alone", "data/identity.py",
        "out.append([path, st.st_size, st.st_mtime_ns])", "out.append(path)"),
    Bug("sft-files-never-count", "pipeline/fingerprint.py",
        'data_manifest(cfg, sft="data" in keys)', "data_manifest(cfg)"),
    Bug("sft-files-count-for-pretraining", "pipeline/fingerprint.py",
        'data_manifest(cfg, sft="data" in keys)', "data_manifest(cfg, sft=True)"),
    Bug("local-data-keys-count", "data/identity.py",
        "value = {k: v for k, v in value.items() if k not in LOCAL_DATA_KEYS}",
        "value = dict(value)"),
    Bug("sft-keys-rerun-pretraining", "data/identity.py",
        "value = {k: v for k, v in value.items() if not k.startswith(SFT_KEYS)}",
        "value = dict(value)"),
    Bug("variant-facts-count", "pipeline/fingerprint.py",
        "value = {k: v for k, v in value.items() if k != FACTS}", "value = dict(value)"),
    # the code a stage runs
    Bug("code-follows-type-checking-blocks", "pipeline/stage_code.py",
        "            for child in node.orelse:\n                visit(child)\n            return\n",
        "            pass\n"),
    Bug("code-skips-package-inits", "pipeline/stage_code.py",
        'todo += [".".join(parts[:i]) for i in range(2, len(parts))]', "pass"),
    Bug("code-skips-imported-names-as-modules", "pipeline/stage_code.py",
        'out.update(f"{base}.{alias.name}" for alias in node.names)', "pass"),
    Bug("relative-import-one-level-up-too-many", "pipeline/stage_code.py",
        "- node.level + 1]", "- node.level]"),
)  # fmt: skip

TARGETS = {
    "claims": Target(
        ("tests/test_claim_verdicts.py", "tests/test_claims.py", "tests/test_stats.py"), CLAIMS
    ),
    "replicate": Target(("tests/test_replicate.py",), REPLICATE),
    # the copy is no git repository and holds no README: the tests that clone it, read its
    # history or HEAD (the gpu run), or read the README stay out
    "registration": Target(
        (
            "tests/test_registration.py",
            "tests/test_registration_arms.py",
            "-k",
            "not seed_runs and not fails_twice and not another_commit and not up_to_date "
            "and not design_seeds_run_first and not gpu_run_records and not readme_keeps",
        ),
        REGISTRATION,
    ),  # fmt: skip
    "niah": Target(("tests/test_niah_scoring.py",), NIAH),
    # test_cache_key's slow tests plan the session's smoke pipeline, which each run would build
    # anew (minutes a bug); the fast ones run, and test_fingerprint.py stands in at unit level
    "fingerprint": Target(
        (
            "tests/test_fingerprint.py",
            "tests/test_stage_reads.py",
            "tests/test_cache_key.py",
            "-m",
            "not slow",
            "--deselect",
            "tests/test_stage_reads.py::test_every_stage_runs_on_its_declared_keys_only",
            "--deselect",
            "tests/test_stage_reads.py::test_local_workers_fork_with_what_their_node_imports",
        ),
        FINGERPRINT,
    ),
}

# pytest plugin (-p mutation_guard): after the session, every loaded ssmax/tests module must
# lie in the copy; their files are written for the harness.
GUARD = """
import json, os, sys
from pathlib import Path

def pytest_sessionfinish(session, exitstatus):
    files = {}
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in ("ssmax", "tests") and getattr(module, "__file__", None):
            files[name] = str(Path(module.__file__).resolve())
    Path(os.environ["MUTATION_CHECK_LOADED"]).write_text(json.dumps(files))
"""


@dataclass
class Outcome:
    target: str
    bug: Bug
    status: str  # killed / survived / timeout
    seconds: float
    by: str = ""  # the first failing test


class Broken(Exception):
    """The check cannot judge: stale bug text, failing baseline, imports from outside."""


def copy_tree(root: Path) -> Path:
    tree = root / "repo"
    tree.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, tree / name)
    (root / "guard").mkdir()
    (root / "guard" / "mutation_guard.py").write_text(GUARD)
    return tree


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[int | None, str, dict]:
    """(pytest's exit code or None on timeout, its output, module -> file it was loaded from)."""
    loaded = tree.parent / "loaded.json"
    loaded.unlink(missing_ok=True)
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(tree / "src"), str(tree.parent / "guard")]),
        "PYTHONDONTWRITEBYTECODE": "1",  # a bug of the same size in the same second: no stale pyc
        "MUTATION_CHECK_LOADED": str(loaded),
    }
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           "-p", "mutation_guard", *tests]  # fmt: skip
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out, {}
    files = json.loads(loaded.read_text()) if loaded.exists() else {}
    stray = {m: f for m, f in files.items() if not Path(f).is_relative_to(tree.resolve())}
    if stray:
        raise Broken(f"modules loaded from outside the copy {tree}: {stray}")
    return proc.returncode, proc.stdout + proc.stderr, files


def first_failure(output: str) -> str:
    match = re.search(r"^(?:FAILED|ERROR) (\S+)", output, re.M)
    return match.group(1) if match else ""


def check_text(name: str, bugs: list[Bug], tree: Path) -> None:
    for bug in bugs:
        count = (tree / "src" / "ssmax" / bug.file).read_text().count(bug.old)
        if count != 1:
            raise Broken(f"{name}/{bug.name}: its text is {count} times in {bug.file}, not once "
                         "(the source changed: update the bug)")  # fmt: skip


def present(tests: tuple[str, ...], tree: Path) -> tuple[str, ...]:
    """The target's pytest arguments less the test files the tree does not (yet) hold."""
    out = []
    for arg in tests:
        file = arg.split("::")[0]
        if file.endswith(".py") and not (tree / file).exists():
            print(f"  (no {file} in this tree: left out)")
            if out and out[-1] == "--deselect":
                out.pop()
            continue
        out.append(arg)
    return tuple(out)


def check_target(name: str, bugs: list[Bug], tests: tuple[str, ...], tree: Path) -> list[Outcome]:
    tests = present(tests, tree)
    start = time.monotonic()
    code, output, files = run_tests(tree, tests, timeout=900)
    baseline = time.monotonic() - start
    if code != 0:
        raise Broken(f"{name}: the tests fail on the unmutated copy:\n{output[-3000:]}")
    imported = {Path(f) for f in files.values()}
    unread = {b.file for b in bugs if (tree / "src" / "ssmax" / b.file).resolve() not in imported}
    if unread:  # (also where the guard wrote nothing: it would see no stray import either)
        raise Broken(f"{name}: its tests never import {sorted(unread)} from the copy")
    print(f"[{name}] tests pass on the unmutated copy in {baseline:.1f} s", flush=True)
    outcomes = []
    for bug in bugs:
        path = tree / "src" / "ssmax" / bug.file
        original = path.read_text()
        path.write_text(original.replace(bug.old, bug.new))
        start = time.monotonic()
        try:
            code, output, _ = run_tests(tree, tests, timeout=60 + 5 * baseline)
        finally:
            path.write_text(original)
        seconds = time.monotonic() - start
        if code is None:
            outcome = Outcome(name, bug, "timeout", seconds, "(killed by the time limit)")
        elif code in (1, 2):  # tests failed, or an error broke collection: the bug is seen
            outcome = Outcome(name, bug, "killed", seconds, first_failure(output) or f"exit {code}")
        elif code == 0:
            outcome = Outcome(name, bug, "survived", seconds)
        else:
            raise Broken(f"{name}/{bug.name}: pytest exit {code}:\n{output[-3000:]}")
        outcomes.append(outcome)
        note = outcome.by
        if outcome.status == "survived":
            note = f"explained: {bug.why}" if bug.why else f"UNEXPLAINED {note}".strip()
        print(f"  {outcome.status:<8} {name}/{bug.name} ({seconds:.1f} s) {note}", flush=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target",
        action="append",
        choices=list(TARGETS),
        help="a target to check (repeatable; default: all, fingerprint last)",
    )
    parser.add_argument("--only", help="only the bugs whose name holds this text")
    parser.add_argument("--list", action="store_true", help="list the bugs and exit")
    args = parser.parse_args(argv)  # fmt: skip
    names = args.target or list(TARGETS)
    if args.list:  # and whether each bug's text is still in the source
        for name in names:
            for bug in TARGETS[name].bugs:
                print(f"{name}/{bug.name}: {bug.file}" + (" (explained)" if bug.why else ""))
        try:
            for name in names:
                check_text(name, list(TARGETS[name].bugs), REPO)
        except Broken as e:
            print(f"mutation check broken: {e}", file=sys.stderr)
            return 2
        return 0
    start, outcomes = time.monotonic(), []
    with tempfile.TemporaryDirectory(prefix="mutation-check-") as tmp:
        tree = copy_tree(Path(tmp))
        chosen = {n: [b for b in TARGETS[n].bugs if args.only is None or args.only in b.name]
                  for n in names}  # fmt: skip
        try:
            for name in names:  # every bug's text first: a stale list fails before any test
                check_text(name, chosen[name], tree)
            for name in names:
                if chosen[name]:
                    outcomes += check_target(name, chosen[name], TARGETS[name].tests, tree)
        except Broken as e:
            print(f"mutation check broken: {e}", file=sys.stderr)
            return 2
    unexplained = [o for o in outcomes if o.status == "survived" and not o.bug.why]
    stale = [o for o in outcomes if o.status != "survived" and o.bug.why]
    print(f"\n{'target':<12} {'bugs':>5} {'killed':>7} {'survived':>9} {'explained':>10}")
    for name in names:
        mine = [o for o in outcomes if o.target == name]
        survived = [o for o in mine if o.status == "survived"]
        print(f"{name:<12} {len(mine):>5} {len(mine) - len(survived):>7} {len(survived):>9} "
              f"{sum(bool(o.bug.why) for o in survived):>10}")  # fmt: skip
    print(f"{time.monotonic() - start:.0f} s in all")
    for o in stale:
        print(f"note: {o.target}/{o.bug.name} is killed now; its `why` can go")
    if unexplained:
        listed = ", ".join(f"{o.target}/{o.bug.name}" for o in unexplained)
        print(f"unexplained survivors: {listed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
