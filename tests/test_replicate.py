"""Another run of some published chains judged against the published run, ordering by ordering
(report.replicate, issue 42 item 5), on the published file itself and on hand-made reruns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ssmax.report.published import PUBLISHED, load, main
from ssmax.report.replicate import compare, read_table, replaced

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
