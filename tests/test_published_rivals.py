"""The rival laws' published files and pages (report.published.rivals, issue 43): written from
a report node's results.json (its verdict seeds, or its design seeds), refused where the seeds
are not those docs/rival-laws.md fixed before the run, and the blocks computed from the file by
the claims' rule, on hand-made per-seed values whose answer is known in advance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ssmax.report.published.rivals import RIVAL_SEEDS, design_criteria, rival_laws, rivals_file
from tests.conftest import make_cfg

LAWS = {"a": "a_softmax", "b": "b_ssmax", "k": "k_scale_invariant", "l": "l_asentmax",
        "m": "m_yarn_temp_inference"}  # fmt: skip
# per seed: an effect every law of that seed shares (paired) and a little noise of its own
SHIFT = [0.0, 0.4, -0.3, 0.2, -0.1, 0.3, -0.2, 0.1, 0.25, -0.05, 0.15, -0.25, 0.35]
# (k) and (m) lower loss than their references, (k) retrieves better; (l) is (b) up to noise
# whose sign alternates by seed (nothing separates them)
LOSS = {"a": 5.0, "b": 4.6, "k": 4.3, "l": 4.6, "m": 4.8}
NIAH = {"a": 0.05, "b": 0.20, "k": 0.40, "l": 0.20, "m": 0.06}


def table(seeds: range, niah_1x_of_l: float = 1.0) -> dict:
    """results.json's shape: variant -> metric -> seed (text) -> value."""
    out: dict = {}
    for x, variant in LAWS.items():
        for seed in seeds:
            noise = (0.02 if seed % 2 else -0.02) if x == "l" else 0.001 * (seed % 3)
            shift = SHIFT[seed]
            values = {f"loss @{k}x": LOSS[x] + shift + i / 10 + noise
                      for i, k in enumerate((5, 10, 20))}  # fmt: skip
            values |= {"niah past 1x": NIAH[x] + shift / 10 + noise,
                       "needle top mean": 0.5 + NIAH[x] + shift / 10 + noise,
                       "niah @1x": niah_1x_of_l if x == "l" else 1.0,
                       "niah @20x": NIAH[x] / 2}  # fmt: skip
            for metric, value in values.items():
                out.setdefault(variant, {}).setdefault(metric, {})[str(seed)] = value
    return out


def report_node(tmp_path: Path, values: dict) -> Path:
    """A report node's folder as the pipeline leaves it (config.yaml of the tiny preset's
    rival_laws run, done.json) with values as its report/results.json; that file's path."""
    node = tmp_path / "pipeline" / "nodes" / "report" / "0123456789abcdef"
    (node / "report").mkdir(parents=True)
    cfg = make_cfg("preset=tiny", "pipeline.file=rival_laws", config_name="pipeline")
    OmegaConf.save(cfg, node / "config.yaml")
    record = {"git_commit": "0123456789abcdef", "cpu": "AMD EPYC", "packages_sha": "d38b70124c4b"}
    (node / "done.json").write_text(json.dumps(record))
    (node / "report" / "results.json").write_text(json.dumps(values))
    return node / "report" / "results.json"


def written(tmp_path: Path, content: dict, name: str) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(content))
    return path


def test_the_verdict_file_holds_the_fixed_seeds_and_its_page_their_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of seeds 0-12: the file keeps 3-12 (the design seeds 0-2 stay out), with the run's
    commit, machine and preset; its block decides the claims by the rule: (k)'s lower loss and
    its retrieval hold, (l)'s claims are inconclusive, (m)'s lower loss holds; every seed's
    value is on the page."""
    content = rivals_file(report_node(tmp_path, table(range(13))), design=False)
    assert content["run"]["seeds"] == RIVAL_SEEDS == list(range(3, 13))
    expected = {"preset": "tiny", "train_len": 128, "commit": "0123456", "cpu": "AMD EPYC"}
    assert {k: content["run"][k] for k in expected} == expected
    assert {s for ms in content["results"].values() for by in ms.values() for s in by} == {
        str(s) for s in RIVAL_SEEDS
    }
    monkeypatch.setattr("ssmax.report.published.rivals.ROOT", tmp_path)
    path = written(tmp_path, content, "rival_laws_seeds3-12.json")
    page, short = rival_laws(path, short=False), rival_laws(path, short=True)
    assert page.startswith("Seeds 3-12 (10), run ") and "at 0123456 on AMD EPYC" in page
    verdicts = dict(re.findall(r"(rival_\w+): (\w+)", short))
    assert verdicts == {"rival_k_loss": "holds", "rival_k_niah": "holds",
                        "rival_l_loss": "inconclusive", "rival_l_niah": "inconclusive",
                        "rival_m_loss": "holds"}  # fmt: skip
    assert "the rivals' claims **3 hold, 0 contradicted, 2 inconclusive** (of 5" in short
    assert "rivals (Holm, m = 11; permutation floor 9 seeds)" in page
    for variant, metrics in content["results"].items():
        for value in metrics["niah past 1x"].values():
            assert f"{value:.3f}" in page, (variant, value)


def test_the_design_file_holds_the_design_seeds_and_its_criteria(tmp_path: Path) -> None:
    """The same run's design seeds 0-2 as the design file; a law under the 1x floor is 'no',
    the others 'yes', and the grid's reach is judged on the best law at 20x."""
    results = report_node(tmp_path, table(range(13), niah_1x_of_l=0.8))
    content = rivals_file(results, design=True)
    assert content["run"]["seeds"] == [0, 1, 2]
    assert content["run"]["design"] == {"seeds": [0, 1, 2], "niah_at_1x": 0.9, "falls_below": 0.5}
    text = design_criteria(written(tmp_path, content, "design.json"))
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    assert rows["(l) NIAH at 1x >= 0.9"].split(" | ")[2] == "no"
    assert rows["(k) NIAH at 1x >= 0.9"].split(" | ")[2] == "yes"
    reach = rows["the best variant's NIAH at the largest context (20x) < 0.5"]
    assert "(k) 0.200" in reach and reach.split(" | ")[2] == "yes"


@pytest.mark.parametrize(
    ("seeds", "design", "message"),
    [(range(3, 11), False, r"has the verdict seeds \[3, .*10\]; .* fixed 3-12 before they ran"),
     (range(0, 3), False, "has no verdict"), (range(3, 13), True, "has no design seed")],
)  # fmt: skip
def test_a_run_without_the_fixed_seeds_is_refused(
    tmp_path: Path, seeds: range, design: bool, message: str
) -> None:
    with pytest.raises(SystemExit, match=message):
        rivals_file(report_node(tmp_path, table(seeds)), design=design)


def test_a_results_json_outside_a_report_node_is_one_line(tmp_path: Path) -> None:
    path = written(tmp_path, table(range(13)), "results.json")
    with pytest.raises(SystemExit, match="is not in a report node's folder"):
        rivals_file(path, design=False)
