"""Issue 60's registration (docs/registration/arms-2026-11-29.*): its rivals family is what
verdicts.rivals forms for its variants, its leaderboard the laws it runs, no published file holds
any of its new laws (none ran before it), and its minimum detectable effects recompute. Its
design seeds run first and are recorded apart; its page (docs/arms.md) shows them, then every
seed, and its two families' verdicts only once every seed is in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ssmax.config.variants import facts
from ssmax.registration import judge
from ssmax.registration.run import main as run_main
from ssmax.registration.run import record, workdir_of
from ssmax.verdicts.registered import DESIGN, ROOT, load, planned, record_path, to_run
from ssmax.verdicts.results import Results, Settings
from ssmax.verdicts.rivals import rival_claims
from tests.test_registration import (
    TINY_COLUMNS,
    committed_as_is,
    hand_made,
    hand_record,
    min_detectable_recompute,
    results_beside,
    smoke_registration,
)

ARMS = ROOT / "docs" / "registration" / "arms-2026-11-29.json"
NEW = {"k_scale_invariant_own_rope", "l_asentmax_nape", "m_yarn_temp_per_pass_inference",
       "m_yarn_whole_dynamic_inference", "n_gated", "o_gated_ssmax", "p_adaptive_temp_inference",
       "q_sink", "r_sink_ssmax"}  # fmt: skip


def test_the_rivals_family_is_the_codes() -> None:
    reg = load(ARMS)
    table = {v: {c: {0: 1.0, 1: 2.0} for c in TINY_COLUMNS} for v in reg.variants}
    results = Results(Settings("tiny", [0, 1], 128), {}, table=table, absent={})
    judged = rival_claims(results, list(reg.variants))
    assert [c.key for c in judged] == reg.data["rule"]["families"]["rivals"]["claims"]
    assert [k.ordering for c in judged for k in c.checks] == list(reg.orderings("rivals"))
    assert len(reg.orderings("rivals")) == 25
    laws = {facts(v).letter for v in reg.variants} - {"a", "b"}
    assert set(reg.data["rule"]["families"]["leaderboard"]["laws"]) == laws


def test_its_new_laws_never_ran_before_it() -> None:
    """No published results file holds a law this registration runs for the first time."""
    reg = load(ARMS)
    assert set(reg.variants) >= NEW
    for path, results in results_beside(reg):
        assert not NEW & set(results), path


def test_the_minimum_detectable_effects_recompute() -> None:
    reg = load(ARMS)
    min_detectable_recompute(reg, len(reg.orderings("rivals")))


def test_the_arms_page_is_up_to_date() -> None:
    assert judge.main(["--check", "--registration", str(ARMS)]) == 0
    assert load(ARMS).page == ROOT / "docs" / "arms.md"


def hand_arms(tmp_path: Path, seeds: list[int]) -> Path:
    """hand_made's run of the arms' registration: (n) above every law in NIAH by 0.3, its
    design seeds recorded too; (p) below the skill's bound on design seed 1."""
    path = hand_made(tmp_path, seeds, source=ARMS, lead="n_gated")
    reg = load(path)
    for seed in reg.design_seeds:
        hand_record(reg, DESIGN, seed, "c" * 40, "n_gated")
    rec = json.loads(record_path(reg, DESIGN, 1).read_text())
    rec["results"]["p_adaptive_temp_inference"]["niah @1x"]["1"] = 0.2
    record_path(reg, DESIGN, 1).write_text(json.dumps(rec))
    return path


def test_an_unfinished_arms_run_shows_its_design_seeds_and_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = hand_arms(tmp_path, [13, 14, 15])
    record_path(load(path), "cpu", 15).unlink()
    committed_as_is(monkeypatch)
    text = judge.page(load(path))
    assert "3 of 3 design seeds recorded (0, 1, 2)" in text
    assert "| (p) | 1.000 | 0.200 | 1.080 | 0.760 | yes |" in text  # the mean decides it
    assert "| (n) | 1.300 | 1.340 | 1.380 | 1.340 | yes |" in text
    assert "2 of 3 planned seeds recorded (13, 14)" in text
    assert "Interim: no verdict" in text and "Verdicts" not in text and " p t " not in text
    assert "| (l2) | niah past 1x | 1.080 | 1.010 |" in text  # every law's values per seed
    assert "(k2), (m2), (m3), (p) train nothing of their own" in text


def test_a_finished_arms_run_is_judged_in_its_two_families(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 seeds (the leaderboard's permutation floor): (n)'s lead holds in rivals (a < n on
    NIAH) and is better in the leaderboard; a seed whose (p) did not form the skill stays in."""
    path = hand_arms(tmp_path, list(range(13, 25)))
    reg = load(path)
    rec = json.loads(record_path(reg, "cpu", 20).read_text())
    rec["results"]["p_adaptive_temp_inference"]["niah @1x"]["20"] = 0.35
    record_path(reg, "cpu", 20).write_text(json.dumps(rec))
    committed_as_is(monkeypatch)
    text = judge.page(reg)
    assert "**Verdicts (confirmatory): rivals: 13 claims, 1 hold, 0 contradicted, 12 " \
           "inconclusive; leaderboard: 100 orderings, 2 better, 0 worse, 98 not separated**" \
           in text  # fmt: skip
    (niah,) = [r for r in text.splitlines() if "(n) retrieves better than softmax" in r]
    assert "| **holds** |" in niah and "(n=12)" in niah  # seed 20 stays in the verdict
    (board,) = [r for r in text.splitlines() if r.startswith("| (n) | niah |")]
    assert board.count("BETTER") == 2  # against (a) and against (b)
    assert "Without the seeds where a variant did not form the skill ([20])" in text


def test_a_family_the_code_forms_otherwise_is_not_confirmatory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = hand_arms(tmp_path, list(range(13, 23)))
    data = json.loads(path.read_text())
    data["rule"]["families"]["rivals"]["orderings"].pop()
    data["rule"]["families"]["leaderboard"]["measures"].remove("loss@20")
    path.write_text(json.dumps(data))
    committed_as_is(monkeypatch)
    text = judge.page(load(path))
    assert "**Verdicts (exploratory (it does not match its registration)):" in text
    assert "the code forms the family rivals of 25 orderings, not the 24 registered" in text
    assert "the code forms the family leaderboard of 100 orderings, not the 80 registered" in text


def test_the_design_seeds_run_first_and_are_recorded_apart(
    tmp_path: Path, smoke_pipeline: list[str]
) -> None:
    """The verdict seeds wait for the design seeds; a design seed that fails twice takes no
    spare; its record (here from the shared smoke pipeline's seed 0) lies in design/."""
    path = smoke_registration(tmp_path, design_seeds=[0, 1], spares=[7])
    reg = load(path)
    args = ["cpu", "--registration", str(path), "--workdir", str(tmp_path / "work")]
    with pytest.raises(SystemExit, match="its design seeds run first \\(0, 1 without"):
        run_main(args)
    with pytest.raises(SystemExit, match="the design seeds run on the cpu"):
        run_main(["gpu", "--design", *args[1:]])
    (out,) = [o.split("=", 1)[1] for o in smoke_pipeline if o.startswith("paths.output_dir=")]
    rec = record(reg, DESIGN, 0, Path(out), 60.0)
    assert rec["registered_run"] == DESIGN and rec["about"].startswith("Design seed 0 of smoke")
    record_path(reg, DESIGN, 0).parent.mkdir(parents=True)
    record_path(reg, DESIGN, 0).write_text(json.dumps(rec))
    record_path(reg, DESIGN, 1, failed=True).write_text(json.dumps({"seed": 1}))
    assert planned(reg, DESIGN) == [0, 1] and to_run(reg, DESIGN) == []
    assert planned(reg, "cpu") == [0]  # the verdict seeds may go now
    assert str(reg.records(DESIGN)).endswith("results/smoke/design")
    assert workdir_of(load(ARMS)) == Path.home() / "ssmax-arms"
