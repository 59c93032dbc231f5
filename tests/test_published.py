# ruff: noqa: E501  (the tables of bad inputs: one case per line)
"""The published verdict run as data (docs/results/verdict_seeds3-10.json): the pages agree with
it, the claims read it as they read a run, the old rule on it gives the published old verdicts,
the seed count fixed for the primary claims follows from the families, and a run's seeds are
placed against it (verdicts.against)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from ssmax.report.headline import SHORT
from ssmax.report.published.pages import PAGES, blocks, replace_block
from ssmax.report.render import markdown
from ssmax.report.table import gather
from ssmax.stages.report import declared
from ssmax.verdicts.against import against, place
from ssmax.verdicts.claims import PRIMARY, claims
from ssmax.verdicts.published_file import PUBLISHED, ROOT, load
from ssmax.verdicts.results import Results, Settings
from ssmax.verdicts.stats import ALPHA, permutation_floor
from tests.typed_outputs import typed

VARIANTS = ["a_softmax", "b_ssmax", "c_ssmax_no_scale", "d_ssmax_bias", "e_swap_after_pretrain",
            "f_switch_during_pretrain"]  # fmt: skip


@pytest.fixture(scope="module")
def made() -> dict[str, str]:
    return blocks(load())


def block(text: str, name: str) -> str:
    start = text.index("\n", text.index(f"<!-- published:{name} ")) + 1
    return text[start : text.index(f"<!-- /published:{name} -->")].rstrip("\n")


@pytest.mark.parametrize("name", list(PAGES))
def test_the_pages_say_what_the_file_holds(made: dict[str, str], name: str) -> None:
    """Each generated block of README.md and docs/results.md is what the file gives now (else:
    `make results-page`)."""
    page = (ROOT / PAGES[name]).read_text()
    assert block(page, name) == made[name]


def test_the_seed_tables_hold_every_published_value(made: dict[str, str]) -> None:
    """Every value of the file is in the page's tables, as published (3 decimals)."""
    pub = load()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in made["seed-tables"].splitlines()}
    assert rows["(b)"].count(" | ") == 8  # a variant and 8 seeds (the last table's row)
    cells = re.findall(r"\| (\d\.\d+)", made["seed-tables"])
    assert len(cells) == 6 * 6 * 8 + 8  # six tables of (a)-(f), (p_n)'s pretraining loss
    assert "**p_n's fit (R²)**: seed 3 0.534, 4 0.673" in made["seed-tables"]
    assert set(pub.run["seeds"]) == {s for v in pub.table.values() for m in v.values() for s in m}


def test_the_file_is_shaped_as_results_json() -> None:
    """The file's metrics are columns a run's results.json has (report.table.gather, the p_n
    fit added by build_report), so a run compares to it name by name."""
    pub = load()
    niah = {"accuracy": {"1": 1.0, "2": 0.5}, "context_multiples": [1, 2],
            "accuracy_grid": [[1.0], [0.5]], "needle_scores": {"top_mean": 0.6}}  # fmt: skip
    run = gather(typed({"pretrain/a_softmax/seed0": {"val_loss": 1.8},
                        "eval_loss/a_softmax/seed0": {"loss_at": {"5": 3.8, "20": 4.4}},
                        "eval_niah/a_softmax/seed0": niah}), declared().columns)  # fmt: skip
    assert set(pub.table["a_softmax"]) == set(run["a_softmax"]) - {"niah @2x", "niah mean"}
    assert run["a_softmax"]["niah past 1x"] == {0: 0.5}
    assert set(pub.table["pn_rationale"]) == {"pretrain val loss", "p_n log fit R²"}
    assert set(pub.absent) == {"loss @1x", "loss @10x", "loss @1x training theta"}


def test_the_old_rule_on_the_file_gives_the_published_old_verdicts() -> None:
    """Wherever the file holds a claim's values, the uncorrected rule on them is the verdict
    published under it; the others are n/a for want of the absent metrics, and say so."""
    pub = load()
    checked = claims(pub.results())
    assert {c.key for c in checked} == set(pub.old_rule)
    for c in checked:
        if c.uncorrected == "n/a":
            assert c.verdict == "n/a" and any(why in c.value for why in pub.absent.values()), c.key
        else:
            assert c.uncorrected == pub.old_rule[c.key], c.key
    na = {c.key for c in checked if c.verdict == "n/a"}
    # contradicted outranks n/a (2026-11-29): (d) and (f) at 20x are contradicted beside the
    # absent loss at 10x; the primary loss orderings at 20x are not decidable at 8 seeds
    assert na == {"long_loss_bc", "theta_robust", "short_loss_e"}


def test_claims_read_a_table_as_they_read_the_nodes() -> None:
    """A run's node outputs and its results.json table (gather) give the same differences,
    p-values and verdicts: the published file is read by the same rule as a run."""
    inputs = {}
    for i, variant in enumerate(VARIANTS):
        for seed in range(4):
            x = 0.01 * ((3 * seed + 5 * i) % 7) + 0.02 * i
            inputs[f"pretrain/{variant}/seed{seed}"] = {"val_loss": 1.8 - x}
            inputs[f"eval_loss/{variant}/seed{seed}"] = {
                "loss_at": {"1": 3.0 + x, "5": 3.8 - x, "10": 4.1 + x / 2, "20": 4.4 - x},
                "base_theta_loss_at_1x": 2.9 + x / 3,
            }
            inputs[f"eval_niah/{variant}/seed{seed}"] = {
                "accuracy": {"1": 1.0, "2": 0.5 + x}, "context_multiples": [1, 2, 4],
                "accuracy_grid": [[1.0], [0.5 + x], [0.2 + x]],
                "needle_scores": {"top_mean": 0.6 + x}}  # fmt: skip
    settings = Settings("test", [0, 1, 2, 3], 128)
    from_nodes = claims(Results.from_inputs(typed(inputs), settings))
    from_table = claims(Results(settings, {}, table=gather(typed(inputs), declared().columns)))
    for a, b in zip(from_nodes, from_table, strict=True):
        assert (a.key, a.verdict, a.uncorrected, a.m) == (b.key, b.verdict, b.uncorrected, b.m)
        for k, j in zip(a.checks, b.checks, strict=True):
            assert k.ordering == j.ordering and k.differences == pytest.approx(j.differences)
            assert (k.p_t, k.p_perm) == (pytest.approx(j.p_t), pytest.approx(j.p_perm))
    assert next(c for c in from_table if c.key == "theta_robust").checks[0].differences


def test_the_seed_count_fixed_for_the_primary_claims() -> None:
    """The tiny preset's families with every metric (loss at 1x, 5x, 10x, 20x): 15 primary
    orderings, 32 secondary; the permutation test reaches Holm's first step 0.05 / 15 from 10
    seeds, Benjamini-Hochberg's 0.05 / 32 from 11. docs/results.md says 10, fixed before any
    new seed ran; the README points to the registration that fixed the confirmatory count."""
    pub = load()
    full = {v: {**ms} for v, ms in pub.table.items()}
    for ms in full.values():
        if "loss @5x" in ms:
            ms.update({m: ms["loss @5x"] for m in ("loss @1x", "loss @10x",
                                                   "loss @1x training theta")})  # fmt: skip
    settings = Settings("tiny", pub.run["seeds"], 128)
    checked = claims(Results(settings, {}, table=full))
    m = {c.family: c.m for c in checked}
    assert m == {"primary": 15, "secondary": 32}
    assert {c.key for c in checked if c.family == "primary"} == set(PRIMARY)
    assert permutation_floor(ALPHA / 15) == 10 and permutation_floor(ALPHA / 32) == 11
    assert {c.floor for c in claims(pub.results()) if c.family == "primary"} == {10}  # m = 13
    docs = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert "fixed on 2026-11-27 before any new seed runs: 10.**" in docs
    assert "15 primary orderings, 32 secondary" in docs
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "docs/registration/confirmatory-2026-11-29.md" in readme  # the count it runs: 24


def test_a_missing_marker_is_named() -> None:
    with pytest.raises(SystemExit, match="no block 'verdicts'"):
        replace_block("no markers here", "verdicts", "x")
    text = "a\n<!-- published:verdicts (made) -->\nold\n<!-- /published:verdicts -->\nb\n"
    assert replace_block(text, "verdicts", "new") == (
        "a\n<!-- published:verdicts (made) -->\nnew\n<!-- /published:verdicts -->\nb\n"
    )


def test_a_value_is_placed_inside_the_range_or_in_sds() -> None:
    """Mean 1.0375, sd 0.0954 of 8 seeds: the 99% prediction interval of one more seed is
    ±3.50 x 1.061 = ±3.71 sd. 1.35 is 3.3 sd out, beyond the range but within it; 1.5 is 4.8 sd
    out, outside it."""
    published = [1.0, 1.2, 1.1, 0.9, 1.0, 1.1, 0.95, 1.05]
    assert place(1.15, published) == ("inside the range", True)
    assert place(1.35, published) == ("+3.3 sd", True)
    assert place(1.5, published) == ("+4.8 sd, outside", False)
    assert place(0.7, published) == ("-3.5 sd", True)
    assert place(0.95, [1.0] * 8) == ("-inf sd, outside", False)  # no spread: only 1.0 is


def test_a_run_is_placed_against_the_published_seeds(tmp_path: Path) -> None:
    """The published seeds against themselves reproduce; one value moved far is named with
    its variant, metric and seed; another preset is not compared; no file, no comparison."""
    pub = load()
    same = against(pub.table, "tiny")
    assert same.line.startswith("This run reproduces the published run (2026-11-27, seeds 3-10)")
    assert len(same.rows) == 6 * 6 + 2 and not any(r.off for r in same.rows)
    assert same.digest and same.file == "docs/results/verdict_seeds3-10.json"
    moved = {v: {m: dict(by_seed) for m, by_seed in ms.items()} for v, ms in pub.table.items()}
    moved["b_ssmax"]["loss @20x"][9] = 5.9
    line = against(moved, "tiny").line
    assert line == ("This run does not reproduce the published run (2026-11-27, seeds 3-10) "
                    "within seed noise in 1 of 38 metric-variant pairs: loss @20x of (b) "
                    "(seed 9).")  # fmt: skip
    assert against(pub.table, "smoke").line.startswith("Not compared: the published run is")
    gone = against(pub.table, "tiny", tmp_path / "none.json")
    assert gone.line.startswith("No published values") and not gone.rows
    page = markdown(Settings("tiny", [9], 128), (["variant"], []), [], [],
                    against=(line, against(moved, "tiny").table()))  # fmt: skip
    assert "## Against the published run" in page and "seed 9: 5.900 (+" in page
    assert math.isfinite(float(page.split("seed 9: 5.900 (+")[1].split(" sd")[0]))
    assert PUBLISHED.exists()


FOLDER = "<a folder>"  # bad_input makes a folder where the file should be
RUN = {"preset": "tiny", "seeds": [3, 4], "train_len": 128, "commit": "abc1234",
       "date": "2026-11-29"}  # fmt: skip
ONE = {"a_softmax": {"needle top mean": {"3": 0.5}}, "b_ssmax": {"needle top mean": {"3": 0.9}}}
# (id, the file's text (None: no file), what the line says); every case under every mode
BAD_FILES = [
    ("missing", None, "no such file"),
    ("a-folder", FOLDER, "a folder; allowed: a results.json file"),
    ("empty", "", "empty"),
    ("blank", "  \n", "empty"),
    ("not-json", "{results: nope", "not JSON"),
    ("json-list", "[1, 2, 3]", "not a results.json"),
    ("json-number", "3", "not a results.json"),
    ("results-a-list", json.dumps({"results": [1, 2], "run": RUN}), "not a results.json"),
    ("results-empty", json.dumps({"results": {}, "run": RUN}), "not a results.json"),
    ("variant-not-a-map", json.dumps({"results": {"a_softmax": [1.0]}, "run": RUN}), "'a_softmax' holds no metrics"),
    ("metric-not-a-map", json.dumps({"results": {"a_softmax": {"niah past 1x": 0.5}}, "run": RUN}), "holds no seeds"),
    ("seed-not-an-integer", json.dumps({"results": {"a_softmax": {"niah past 1x": {"three": 0.5}}}, "run": RUN}), "a seed that is not an integer"),
    ("value-not-a-number", json.dumps({"results": {"a_softmax": {"niah past 1x": {"3": "0.5"}}}, "run": RUN}), "a value that is not a number"),
    ("one-metric-one-seed", json.dumps({"results": ONE, "run": RUN}), "too few seeds or metrics to judge"),
    ("one-variant", json.dumps({"results": {"a_softmax": {"niah past 1x": {"3": 0.5, "4": 0.6}}}, "run": RUN}), "too few seeds or metrics to judge"),
    ("no-shared-metric", json.dumps({"results": {"a_softmax": {"niah past 1x": {"3": 0.5, "4": 0.6}}, "b_ssmax": {"loss @5x": {"3": 3.5, "4": 3.6}}}, "run": RUN}), "too few seeds or metrics to judge"),
]  # fmt: skip
MODES = {
    "file": lambda p: [p],
    "check": lambda p: [p, "--check"],
    "replicate": lambda p: ["--replicate", p],
    "extend": lambda p: ["--extend", p],
    "rivals": lambda p: ["--rivals", p],
    "rivals-design": lambda p: ["--rivals-design", p],
}
FILE_ONLY = [  # the file argument is a published file: its run said beside its values
    ("no-run", json.dumps({"results": {"a_softmax": {"m": {"3": 1.0}}}}), "not a published file"),
    ("run-lacks-keys", json.dumps({"results": ONE, "run": {"seeds": [3]}}), "lacks preset, train_len"),
    ("seeds-beyond-run", json.dumps({"results": {v: {"niah past 1x": {"3": 0.5, "9": 0.6}} for v in ("a_softmax", "b_ssmax")}, "run": RUN}), "values of seeds [9], which run.seeds"),
]  # fmt: skip


def bad_input(tmp_path: Path, text: str | None, argv: list[str], monkeypatch: pytest.MonkeyPatch,
              capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list]:  # fmt: skip
    """main(argv) with the bad file at {p}: (exit status, stderr, the writes it tried)."""
    import ssmax.report.published.__main__ as published

    path = tmp_path / "results.json"
    if text == FOLDER:
        path.mkdir()
    elif text is not None:
        path.write_text(text)
    writes: list = []
    monkeypatch.setattr(published, "atomic_write_json", lambda *a, **k: writes.append(a))
    monkeypatch.setattr(published, "atomic_write_text", lambda *a, **k: writes.append(a))
    code = published.main([str(path) if x == "{p}" else x for x in argv])
    out = capsys.readouterr()
    assert not out.out, out.out
    return code, out.err, writes


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("text", "message"), [c[1:] for c in BAD_FILES],
                         ids=[c[0] for c in BAD_FILES])  # fmt: skip
def test_a_bad_results_file_is_one_line_exit_2_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    mode: str, text: str | None, message: str,
) -> None:  # fmt: skip
    """Every mode of `python -m ssmax.report.published` that reads a results file: a bad one
    is one line on stderr naming the file and what is wrong, exit status 2, no traceback,
    nothing written (no page, no file of docs/results/)."""
    code, err, writes = bad_input(tmp_path, text, MODES[mode]("{p}"), monkeypatch, capsys)
    assert code == 2 and not writes
    assert err.count("\n") == 1 and err.startswith(f"error: {tmp_path / 'results.json'}: "), err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in FILE_ONLY],
                         ids=[c[0] for c in FILE_ONLY])  # fmt: skip
def test_a_bad_published_file_is_one_line_exit_2_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    text: str, message: str,
) -> None:  # fmt: skip
    for argv in (["{p}"], ["{p}", "--check"]):
        code, err, writes = bad_input(tmp_path, text, argv, monkeypatch, capsys)
        assert code == 2 and not writes and err.count("\n") == 1 and message in err, err


def test_the_readme_leads_with_one_line_per_primary_claim() -> None:
    """Generated from the files (report.headline): each primary claim once, its verdict, its
    effects with their intervals, the seeds and hardware, and that it is exploratory."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- published:headline ")[1].split("<!-- /published:headline -->")[0]
    lines = [ln for ln in block.splitlines() if ln.startswith("- ")]
    assert [ln.split(":")[0][2:] for ln in lines] == [SHORT[k].split(":")[0] for k in PRIMARY]
    for ln in lines:
        assert "on 10 CPU seeds (3-12), exploratory" in ln and "(n=10)" in ln
        verdict = r"\*\*(holds|contradicted|inconclusive|n/a|not decidable at \d+ seeds)\*\*"
        assert re.search(verdict, ln)
