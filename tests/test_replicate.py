"""Another run of some published chains judged on its own pairs beside the published run,
ordering by ordering (verdicts.replicate, issue 42 item 5; the registration of 2026-11-29), on the
published file itself and on hand-made reruns; and fresh seeds added to the published run (the
extension, item 4)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ssmax.report.published.__main__ import main
from ssmax.report.published.pages import extended_verdicts, extension_from
from ssmax.verdicts.claims import claims
from ssmax.verdicts.multiplicity import UNDECIDABLE
from ssmax.verdicts.published_file import PUBLISHED, Published, extended, load
from ssmax.verdicts.replicate import compare, read_table, table
from ssmax.verdicts.results import Results, Settings
from tests.conftest import make_cfg

A, B = "a_softmax", "b_ssmax"


def rerun_of(*variants: str, shift: float = 0.0, metric: str = "needle top mean") -> dict:
    """The published values of `variants`, one metric of the last moved by `shift`."""
    pub = load()
    table = {v: {m: dict(by_seed) for m, by_seed in pub.table[v].items()} for v in variants}
    table[variants[-1]][metric] = {s: x + shift for s, x in table[variants[-1]][metric].items()}
    return table


def test_the_same_values_give_every_effect_again_each_ordering_once() -> None:
    """(a) and (b) rerun with the published values: every (a)-(b) ordering's effect is the
    published one (the intervals overlap), the claims on (a) and (b) alone are judged in their
    own family (primary, m = 2), each ordering once, and the missing metrics are named."""
    rep = compare(load().results(), rerun_of(A, B))
    assert {e.ordering.split(" on ")[0] for e in rep.effects} <= {"a < b", "b < a"}
    assert all(e.overlap and e.published == e.other for e in rep.effects if e.other.n)
    assert {(c.key, c.family, c.m) for c in rep.own} == {
        ("niah_b_above_a", "primary", 2),
        ("needle_b_above_a", "primary", 2),
    }
    assert [x.ordering for x in rep.again] == ["a < b on niah", "a < b on needle_top"]
    assert all(x.same_uncorrected for x in rep.again)
    assert "b < a on loss@10" in rep.left_out  # the file lacks loss @10x


def test_an_ordering_stated_by_two_claims_is_counted_once() -> None:
    """(a)-(f) rerun: a < b on needle_top is stated by needle_b_above_a (primary) and
    needle_b_highest (secondary); it is one row, of its first claim, and one count."""
    variants = ["a_softmax", "b_ssmax", "c_ssmax_no_scale", "d_ssmax_bias",
                "e_swap_after_pretrain", "f_switch_during_pretrain"]  # fmt: skip
    rep = compare(load().results(), rerun_of(*variants))
    labels = [x.ordering for x in rep.again]
    assert len(labels) == len(set(labels)) and labels.count("a < b on needle_top") == 1
    assert next(x for x in rep.again if x.ordering == "a < b on needle_top").claim == (
        "needle_b_above_a")  # fmt: skip
    decidable = [x for x in rep.again if x.decidable]
    assert table(rep).count(f"of {len(decidable)} orderings decidable in both runs") == 1


def test_a_rerun_that_loses_the_lead_is_not_the_same() -> None:
    """(b)'s needle scores lowered until (b) is below (a) (and raised far above): the needle
    intervals no longer overlap and the uncorrected verdict does not come again; the other
    metrics' do."""
    rep = compare(load().results(), rerun_of(A, B, shift=-1.0))
    needle = next(e for e in rep.effects if e.ordering == "a < b on needle_top")
    assert needle.overlap is False and needle.same_uncorrected is False
    assert needle.other.verdict() == "contradicted"
    above = compare(load().results(), rerun_of(A, B, shift=1.0)).effects
    assert next(e for e in above if e.ordering == "a < b on needle_top").overlap is False
    assert all(e.overlap for e in rep.effects if e is not needle and e.other.n and e.published.n)


def own_pair_tables() -> tuple[Results, dict]:
    """A published run of (a)-(f), 8 seeds: NIAH, needle score and pretraining loss, (b) above
    (a) in the first two, (c)-(f) beside (a); and another run of (a) and (b), 8 seeds, (b)
    above (a) in every seed in NIAH and the needle score."""
    shift = [0.0, 0.04, -0.03, 0.02, -0.01, 0.03, -0.02, 0.01]
    wobble = [0.02, -0.03, 0.01, -0.02, 0.03, -0.01, 0.02, -0.02]
    seeds = range(3, 11)

    def col(base: float, tilt: float = 0.0) -> dict[int, float]:
        return {s: base + shift[i] + tilt * wobble[i] for i, s in enumerate(seeds)}

    levels = {"a_softmax": 0.3, "b_ssmax": 0.6, "c_ssmax_no_scale": 0.3, "d_ssmax_bias": 0.31,
              "e_swap_after_pretrain": 0.29, "f_switch_during_pretrain": 0.3}  # fmt: skip
    pub = {
        v: {
            "needle top mean": col(x, i),
            "niah past 1x": col(x / 2, -i),
            "pretrain val loss": col(1.8, i),
        }
        for i, (v, x) in enumerate(levels.items())
    }
    other = {A: {"needle top mean": col(0.3), "niah past 1x": col(0.15),
                 "pretrain val loss": col(1.8)},
             B: {"needle top mean": col(0.5, 1.0), "niah past 1x": col(0.3, 1.0),
                 "pretrain val loss": col(1.8, 1.0)}}  # fmt: skip
    settings = Settings("tiny", list(seeds), 128)
    return Results(settings, {}, table=pub), other


def test_a_replication_is_judged_on_its_own_pairs() -> None:
    """The other run's (a) and (b) beside the published (c)-(f) in one table (cross-machine
    pairs: the old verdicts.replicate) would put its a < b orderings in the published families
    (primary m = 9 with pretraining's 3 orderings, which pair the other run's (a) with the
    published (c) and (d): floor 9 seeds), where 8 seeds are not decidable.
    Judged on its own pairs, only the claims on (a) and (b) count, in their own family (m = 2,
    floor 7), and both of its orderings hold; no published value enters its tests."""
    pub, other = own_pair_tables()
    crossed = claims(replace(pub, table={**pub.table, **other}))
    mixed = {k.ordering: k.verdict for c in crossed if c.key == "needle_b_above_a"
             for k in c.checks}  # fmt: skip
    assert mixed == {"a < b on needle_top": UNDECIDABLE}
    assert {(c.family, c.m) for c in crossed if c.key == "needle_b_above_a"} == {("primary", 9)}
    rep = compare(pub, other)
    assert {(c.family, c.m, c.floor) for c in rep.own} == {("primary", 2, 7)}
    assert {x.ordering: x.other.verdict for x in rep.again} == {
        "a < b on niah": "holds", "a < b on needle_top": "holds"}  # fmt: skip
    own = {k.ordering: k for c in rep.own for k in c.checks}
    assert own["a < b on needle_top"].differences == {
        s: other[B]["needle top mean"][s] - other[A]["needle top mean"][s] for s in range(3, 11)
    }
    assert all(x.published.verdict == UNDECIDABLE and not x.decidable for x in rep.again)
    text = table(rep)
    assert text.startswith("Judged on its own paired seeds (3-10: 8) only")
    assert "primary (Holm, m = 2; permutation floor 7 seeds)" in text
    assert "0 of 0 orderings decidable in both runs came again" in text


def test_a_replication_uses_its_own_seeds() -> None:
    """A rerun with a seed the published run lacks: its own pairs, so the seed counts there
    (9 seeds), and the effects show each run's own count."""
    other = rerun_of(A, B)
    for v in (A, B):
        other[v]["needle top mean"][99] = other[v]["needle top mean"][3]
    rep = compare(load().results(), other)
    needle = next(e for e in rep.effects if e.ordering == "a < b on needle_top")
    assert (needle.published.n, needle.other.n) == (8, 9) and rep.seeds[-1] == 99


def test_the_command_reads_a_results_json_and_says_what_came_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": rerun_of(A, B)}))
    assert read_table(path)[B] == load().table[B]
    assert main(["--replicate", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Judged on its own paired seeds (3-10: 8) only")
    assert "| ordering | published | other run | intervals overlap |" in out


def test_an_unknown_variant_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"z_nope": {"needle top mean": {"3": 0.1, "4": 0.2}},
                                A: {"needle top mean": {"3": 0.1, "4": 0.2}}}))  # fmt: skip
    assert main([str(PUBLISHED), "--replicate", str(path)]) == 2
    assert "z_nope is not in the published file" in capsys.readouterr().err


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
    assert before["needle_b_above_a"] == UNDECIDABLE and after["needle_b_above_a"] == "holds"


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
