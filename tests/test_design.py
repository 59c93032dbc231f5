"""A reduced preset's design criteria (preset.design) checked on hand-made NIAH results."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ssmax.pipeline.run import compose_pipeline
from ssmax.report.build import settings_from_cfg
from ssmax.verdicts.design import design_rows, overlap_line, without_failed
from ssmax.verdicts.published_file import load, skill_floor
from ssmax.verdicts.results import Design, Results, Settings
from tests.typed_outputs import typed

DESIGN = Design(seeds=(0, 1, 2), niah_at_1x=0.9, falls_below=0.5)
VARIANTS = ["a_softmax", "b_ssmax"]


def niah(at: dict[str, float]) -> dict:
    """An eval_niah node's outputs with these per-multiple accuracies."""
    return {"accuracy": {k: v for k, v in at.items()}}


def results(per_seed: dict[str, dict[int, dict[str, float]]]) -> Results:
    inputs = {f"eval_niah/{variant}/seed{seed}": niah(at)
              for variant, seeds in per_seed.items() for seed, at in seeds.items()}  # fmt: skip
    return Results.from_inputs(typed(inputs), Settings("tiny", [0, 1, 2], 128))


def test_met_when_every_variant_retrieves_at_1x_and_the_grid_reaches_failure() -> None:
    res = results({
        "a_softmax": {s: {"1": 0.9 + 0.05 * (s == 0), "20": 0.1} for s in (0, 1, 2)},
        "b_ssmax": {s: {"1": 1.0, "20": 0.45} for s in (0, 1, 2)},
    })  # fmt: skip
    rows = design_rows(res, DESIGN, VARIANTS)
    assert [r[:3] for r in rows] == [
        ["(a) NIAH at 1x >= 0.9", "0.917 (3 of 3 seeds)", "yes"],
        ["(b) NIAH at 1x >= 0.9", "1.000 (3 of 3 seeds)", "yes"],
        ["(a) NIAH at 1x >= 0.5 in each seed (the skill formed)", "3 of 3 seeds", "yes"],
        ["(b) NIAH at 1x >= 0.5 in each seed (the skill formed)", "3 of 3 seeds", "yes"],
        ["the best variant's NIAH at the largest context (20x) < 0.5", "(b) 0.450", "yes"],
    ]


def test_not_met_by_one_variant_or_by_a_grid_too_short() -> None:
    res = results({
        "a_softmax": {0: {"1": 0.2, "4": 0.2}, 1: {"1": 1.0, "4": 0.2}, 2: {"1": 1.0, "4": 0.2}},
        "b_ssmax": {0: {"1": 1.0, "4": 0.6}, 1: {"1": 1.0, "4": 0.6}, 2: {"1": 1.0, "4": 0.6}},
    })  # fmt: skip
    rows = design_rows(res, DESIGN, VARIANTS)
    # (a) 0.733 < 0.9, its seed 0 below 0.5; (b) still 0.6 at 4x
    assert [r[2] for r in rows] == ["no", "yes", "no", "yes", "no"]
    assert rows[0][1] == "0.733 (3 of 3 seeds)" and rows[4][1] == "(b) 0.600"
    assert rows[2][1] == "2 of 3 seeds" and rows[2][3] == "not in seed 0 (0.20)"


def test_only_the_design_seeds_count() -> None:
    """Seeds 3 and 4 (verdict seeds) are left out, whatever they hold."""
    seeds = {0: {"1": 1.0, "8": 0.0}, 3: {"1": 0.0, "8": 1.0}, 4: {"1": 0.0, "8": 1.0}}
    rows = design_rows(results({"a_softmax": seeds}), DESIGN, VARIANTS)
    assert rows == [  # the last column: every seed of the run, information only
        ["(a) NIAH at 1x >= 0.9", "1.000 (1 of 3 seeds)", "yes", "0.333 (3 of 3 seeds): no"],
        ["(a) NIAH at 1x >= 0.5 in each seed (the skill formed)", "1 of 1 seeds", "yes",
         "not in seed 3 (0.00), 4 (0.00)"],
        ["the best variant's NIAH at the largest context (8x) < 0.5", "(a) 0.000", "yes",
         "(a) 0.667: no"],
    ]  # fmt: skip
    none = design_rows(results({"a_softmax": {5: {"1": 1.0}}}), DESIGN, VARIANTS)
    assert none == [  # a verdict run: nothing from the design seeds, its own seeds shown
        ["(a) NIAH at 1x >= 0.9", "-", "-", "1.000 (1 of 1 seeds): yes"],
        ["(a) NIAH at 1x >= 0.5 in each seed (the skill formed)", "-", "-", "every seed (1)"],
        ["the best variant's NIAH at the largest context (1x) < 0.5", "-", "-", "(a) 1.000: no"],
    ]


def test_design_seeds_among_the_verdict_seeds_are_named() -> None:
    assert overlap_line(DESIGN, [3, 4, 5]) == ""
    line = overlap_line(DESIGN, [2, 3, 4])
    assert line.startswith("Seeds [2] are design seeds") and "not independent" in line


@pytest.mark.parametrize(("preset", "design"), [("tiny", DESIGN), ("paper", None)])
def test_the_preset_states_its_design(preset: str, design: Design | None) -> None:
    cfg = compose_pipeline([f"preset={preset}"])
    assert settings_from_cfg(cfg).design == design


def test_the_report_shows_the_criteria_and_names_design_seeds(tmp_path) -> None:  # noqa: ANN001
    from ssmax.report.build import build_report
    from ssmax.stages.report import declared

    inputs = {f"eval_niah/a_softmax/seed{s}": niah({"1": 1.0, "4": 0.2}) for s in (2, 3)}
    settings = Settings("tiny", [2, 3], 128, variants=["a_softmax"], design=DESIGN)
    out = build_report(typed(inputs), settings, tmp_path, declared())
    md = (tmp_path / "report.md").read_text()
    assert (
        "## Design criteria" in md
        and "| (a) NIAH at 1x >= 0.9 | 1.000 (1 of 3 seeds) | yes |" in md
    )
    assert "Seeds [2] are design seeds" in md
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Design criteria</h2>" in page and "Seeds [2] are design seeds" in page
    assert out["report_md"] == str(tmp_path / "report.md")


def test_seeds_where_the_skill_did_not_form_are_judged_without_beside() -> None:
    """Seed 4's (a) found 7 of 20 needles at 1x: the claims are judged again without seed 4
    (information beside the verdicts; the seed stays in them)."""
    res = results({v: {s: {"1": 0.35 if (v, s) == ("a_softmax", 4) else 1.0, "4": 0.2 + 0.1 * s}
                       for s in (3, 4, 5)} for v in VARIANTS})  # fmt: skip
    seen: list[list[int]] = []

    def judge(r: Results) -> list[SimpleNamespace]:
        seen.append(sorted(r.get("eval_niah", "b_ssmax")))
        return [SimpleNamespace(verdict="inconclusive")]

    assert without_failed(res, VARIANTS, 0.5, judge) == ([4], ["inconclusive"])
    assert seen == [[3, 5]] and res.without([4]).settings.seeds == [0, 1, 2]
    assert sorted(res.get("eval_niah", "a_softmax")) == [3, 4, 5]  # the run itself keeps it
    assert without_failed(res, ["b_ssmax"], 0.5, judge) == ([], [])


def test_the_published_files_floor_is_the_tiny_presets() -> None:
    tiny = settings_from_cfg(compose_pipeline(["preset=tiny"]))
    assert skill_floor(load()) == tiny.design.falls_below
