"""The length laws' registration (docs/registration/length-laws-2026-11-30.*): its one family is
the leaderboard the code forms for (g)-(j), its seeds are fresh (no other registration plans
them, no published file holds them), none of its laws has a published result (they never ran
on the preset as designed), its minimum detectable effects recompute, and its page judges a
finished run in that family alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssmax.config.variants import facts
from ssmax.registration import judge
from ssmax.registration.families import differs
from ssmax.registration.families import judge as judge_families
from ssmax.registration.run import workdir_of
from ssmax.verdicts.registered import ROOT, load
from ssmax.verdicts.results import Results, Settings
from ssmax.verdicts.stats import permutation_floor
from tests.test_registration import (
    TINY_COLUMNS,
    committed_as_is,
    hand_made,
    min_detectable_recompute,
    results_beside,
)

LAWS = ROOT / "docs" / "registration" / "length-laws-2026-11-30.json"


def test_its_family_is_the_leaderboard_the_code_forms() -> None:
    reg = load(LAWS)
    table = {v: {c: {0: 1.0, 1: 2.0} for c in TINY_COLUMNS} for v in reg.variants}
    checked = judge_families(reg, Results(Settings("tiny", [0, 1], 128), {}, table=table,
                                          absent={}))  # fmt: skip
    assert [c.family for c in checked] == ["leaderboard"] and differs(reg, checked) == []
    assert len(checked[0].checks) == 40
    assert set(reg.data["rule"]["families"]["leaderboard"]["laws"]) == {
        facts(v).letter for v in reg.variants} - {"a", "b"}  # fmt: skip


def test_its_seeds_are_fresh_and_its_laws_never_ran_on_this_preset() -> None:
    reg = load(LAWS)
    ours = set(reg.seeds) | set(reg.seeds_of("gpu")) | set(reg.spares)
    for other in (ROOT / "docs" / "registration").glob("*.json"):
        if other != LAWS:
            them = load(other)
            assert not ours & (set(them.seeds) | set(them.spares) | {
                s for run in them.runs for s in them.seeds_of(run)}), other  # fmt: skip
    laws = set(reg.variants) - {"a_softmax", "b_ssmax"}
    for path, results in results_beside(reg):
        assert not laws & set(results), path
        seen = {int(s) for ms in results.values() for by in ms.values() for s in by}
        assert not seen & ours, path


def test_its_minimum_detectable_effects_and_floor_recompute() -> None:
    reg = load(LAWS)
    assert permutation_floor(reg.data["rule"]["alpha"] / 40) == 11
    min_detectable_recompute(reg, 40)


def test_its_page_is_up_to_date_and_its_workdir_its_own() -> None:
    assert judge.main(["--check", "--registration", str(LAWS)]) == 0
    assert load(LAWS).page == ROOT / "docs" / "length-laws.md"
    assert workdir_of(load(LAWS)) == Path.home() / "ssmax-length-laws"


def test_a_finished_run_is_judged_in_its_leaderboard_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """11 seeds (its permutation floor): (i)'s NIAH lead is better than (a) and (b); nothing
    else separates, and no rivals or paper family appears."""
    path = hand_made(tmp_path, list(range(101, 112)), source=LAWS, lead="i_llama4_temp")
    committed_as_is(monkeypatch)
    text = judge.page(load(path))
    assert "**Verdicts (confirmatory): leaderboard: 40 orderings, 2 better, 0 worse, 38 not " \
           "separated**" in text  # fmt: skip
    (board,) = [r for r in text.splitlines() if r.startswith("| (i) | niah |")]
    assert board.count("BETTER") == 2
    assert "Family rivals" not in text and "primary" not in text
