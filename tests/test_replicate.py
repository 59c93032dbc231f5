"""Another run of some published chains judged against the published run, ordering by ordering
(report.replicate, issue 42 item 5), on the published file itself and on hand-made reruns; and
fresh seeds added to the published run (the extension, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ssmax.report.claims import claims
from ssmax.report.published import (
    PUBLISHED,
    Published,
    extended,
    extended_verdicts,
    extension_from,
    load,
    main,
)
from ssmax.report.replicate import compare, read_table, replaced
from tests.conftest import make_cfg

A, B = "a_softmax", "b_ssmax"


def rerun_of(*variants: str, shift: float = 0.0, metric: str = "needle top mean") -> dict:
    """The published values of `variants`, one metric of the last moved by `shift`."""
    pub = load()
    table = {v: {m: dict(by_seed) for m, by_seed in pub.table[v].items()} for v in variants}
    table[variants[-1]][metric] = {s: x + shift for s, x in table[variants[-1]][metric].items()}
    return table


def test_the_same_values_give_every_verdict_again() -> None:
    """(a) and (b) rerun with the published values: every (a)-(b) ordering comes again, the
    orderings with (c)-(f) are not compared, and the missing metrics are named."""
    again, left_out = compare(load().results(), rerun_of(A, B))
    assert again and all(x.same and x.same_uncorrected for x in again)
    assert {x.ordering.split(" on ")[0] for x in again} <= {"a < b", "b < a"}
    assert any("loss@10" in why for why in left_out)  # the file lacks loss @10x


def test_a_rerun_that_loses_the_lead_is_not_the_same() -> None:
    """(b)'s needle scores lowered until (b) is below (a): the needle orderings that held
    uncorrected do not come again; the other metrics' orderings do."""
    again, _ = compare(load().results(), rerun_of(A, B, shift=-1.0))
    needle = [x for x in again if x.ordering == "a < b on needle_top"]
    assert needle and all(not x.same_uncorrected for x in needle)
    assert all(x.other.uncorrected == "contradicted" for x in needle)
    assert all(x.same for x in again if "needle" not in x.ordering)


def test_only_the_seeds_of_the_published_run_are_compared() -> None:
    """A rerun with an extra seed: that seed plays no part (the published run has none)."""
    other = rerun_of(A, B)
    other[B]["needle top mean"][99] = -100.0
    pub = replaced(load().results(), other)
    assert 99 not in pub.table[B]["needle top mean"]
    assert all(x.same for x in compare(load().results(), other)[0])


def test_the_command_reads_a_results_json_and_says_what_came_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": rerun_of(A, B)}))
    assert read_table(path)[B] == load().table[B]
    assert main(["--replicate", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("6 of 6 orderings' verdicts came again under the rule of issue 42")


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such file"), ({"z_nope": {}}, "z_nope is not in the published file")],
)
def test_bad_input_is_one_line(tmp_path: Path, content: dict | None, message: str) -> None:
    path = tmp_path / "other.json"
    if content is not None:
        path.write_text(json.dumps(content))
    with pytest.raises(SystemExit, match=message):
        main([str(PUBLISHED), "--replicate", str(path)])


def run_with_added_seeds(tmp_path: Path, seeds: tuple[int, ...] = (11, 12)) -> Path:
    """A run's results.json holding the published seeds 3 and 4's values again as `seeds`, and
    loss @10x (which the published file lacks); its report node's done record and config
    beside it."""
    pub = load()
    table = {v: {m: {str(new): by_seed[old] for new, old in zip(seeds, (3, 4), strict=True)}
                 for m, by_seed in ms.items()} for v, ms in pub.table.items()}  # fmt: skip
    table[A]["loss @10x"] = {str(s): 4.0 for s in seeds}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(table))
    (tmp_path / "done.json").write_text(json.dumps({"git_commit": "abcdef0123", "cpu": "AMD"}))
    OmegaConf.save(make_cfg("preset=tiny", config_name="pipeline"), tmp_path / "config.yaml")
    return path


def test_an_extension_is_decided_with_the_published_seeds_beside_the_8_seed_verdicts(
    tmp_path: Path,
) -> None:
    """The added seeds' values join the published ones for the metrics the file holds (loss
    @10x, only in the added seeds, stays out), and the table says they came after the first
    eight were seen, with both verdicts side by side."""
    pub = load()
    content = extension_from(run_with_added_seeds(tmp_path), pub)
    assert content["run"]["seeds"] == [11, 12] and content["run"]["commit"] == "abcdef0"
    ext_path = tmp_path / "verdict_seeds11-12.json"
    ext_path.write_text(json.dumps(content))
    both = extended(pub, load(ext_path))
    assert both.run["seeds"] == [3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert set(both.table[B]["needle top mean"]) == set(both.run["seeds"])
    assert "loss @10x" not in both.table[A]
    text = extended_verdicts(pub, claims(pub.results()), ext_path)
    assert text.startswith("Seeds 3-12 (10; 11, 12 added after the first 8 were seen")
    assert "| 8 seeds | 10 seeds |" in text


def test_ten_seeds_can_decide_what_eight_cannot() -> None:
    """(b)'s needle lead over (a), every published seed on the paper's side: at 8 seeds the
    exact permutation test cannot pass Holm (2 / 256 x 13 > 0.05); with two more seeds on that
    side (the published seeds 3 and 4 again) it can, and the primary claim holds."""
    pub = load()
    ext = Published({v: {m: {11: s[3], 12: s[4]} for m, s in ms.items()}
                     for v, ms in pub.table.items()}, {**pub.run, "seeds": [11, 12]})  # fmt: skip
    before = {c.key: c.verdict for c in claims(pub.results())}
    after = {c.key: c.verdict for c in claims(extended(pub, ext).results())}
    assert before["needle_b_above_a"] == "inconclusive" and after["needle_b_above_a"] == "holds"


@pytest.mark.parametrize(
    ("seeds", "message"),
    [((3, 11), "repeats published seeds \\[3\\]"), ((3, 4), "has no seed that the published")],
)
def test_an_extension_adds_fresh_seeds_only(tmp_path: Path, seeds: tuple, message: str) -> None:
    path = run_with_added_seeds(tmp_path, seeds)
    pub = load()
    with pytest.raises(SystemExit, match=message):
        content = extension_from(path, pub)
        content["run"]["seeds"] = list(seeds)  # as if written by hand
        extended(pub, Published(read_table(path), content["run"]))
