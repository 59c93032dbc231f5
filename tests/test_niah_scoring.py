"""NIAH scoring on hand-made records with known answers (no model, no decoding): score_answer,
accuracy_grid, the eval_niah stage's per-multiple accuracy (niah_summary), the mean its outputs
give past 1x (Outputs.mean_accuracy) and the claim metrics niah / niah@k.

Every expected number below is written by hand from CELLS, not computed by the code under test.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from ssmax.evals.niah import NeedleRecord, accuracy_grid, score_answer
from ssmax.stages.eval_niah import niah_summary
from ssmax.verdicts.metrics import values_of
from ssmax.verdicts.results import Results, Settings
from tests.typed_outputs import outputs, typed

N = 128  # training length: contexts 128, 256, 512 are multiples 1, 2, 4
NUMBER = "8106422"

# Decoded answers by kind, and the score each must get against NUMBER.
ANSWERS: dict[str, tuple[str, str]] = {
    "F": (" 8106422", "full"),
    "D": (" 8106423", "first_digit"),  # right first digit only
    "L": (" 81064221", "full"),  # the number, then more digits (the reply cannot end: no EOS)
    "S": (" 810642", "first_digit"),  # one digit short
    "W": (" 1106422", "wrong"),
    "Z": (" 08106422", "wrong"),  # zero-padded: its first digit is 0, not 8
    "X": (" Tokyo, I think.", "wrong"),  # no digits at all
    "P": (" It is 8106423.", "first_digit"),  # words first: the reply is the first digit run
}

# (context, depth) -> the answers of that cell's samples; a different count per cell.
CELLS: dict[tuple[int, float], str] = {
    (128, 0.1): "FFFW",  # full 3/4  loose 3/4
    (128, 0.5): "FDWX",  # full 1/4  loose 2/4
    (128, 0.9): "DS",  #   full 0/2  loose 2/2
    (256, 0.1): "FZ",  #   full 1/2  loose 1/2
    (256, 0.5): "D",  #    full 0/1  loose 1/1
    (256, 0.9): "FFS",  #  full 2/3  loose 3/3
    (512, 0.1): "XX",  #   full 0/2  loose 0/2  (no digits anywhere in the cell)
    (512, 0.5): "FDD",  #  full 1/3  loose 3/3
    (512, 0.9): "L",  #    full 1/1  loose 1/1
}
CONTEXTS, DEPTHS, MULTIPLES = [128, 256, 512], [0.1, 0.5, 0.9], [1, 2, 4]
FULL_GRID = [
    [3 / 4, 1 / 4, 0],
    [1 / 2, 0, 2 / 3],
    [0, 1 / 3, 1],
]
LOOSE_GRID = [
    [3 / 4, 2 / 4, 1],
    [1 / 2, 1, 1],
    [0, 1, 1],
]
# mean over depths of each row (each cell weighs the same, whatever its sample count)
FULL_AT = {"1": 1 / 3, "2": 7 / 18, "4": 4 / 9}  # (3/4+1/4+0)/3, (1/2+0+2/3)/3, (0+1/3+1)/3
LOOSE_AT = {"1": 3 / 4, "2": 5 / 6, "4": 2 / 3}  # (3/4+1/2+1)/3, (1/2+1+1)/3, (0+1+1)/3
NIAH_PAST_1X = 5 / 12  # (7/18 + 4/9) / 2; over every multiple it would be 7/18


def records_of(cells: dict[tuple[int, float], str], seed: int = 1) -> list[NeedleRecord]:
    """One scored record per answer letter of every cell, in a shuffled order whose first
    appearances of contexts and of depths are not sorted (order of arrival must not matter)."""
    records = [
        NeedleRecord(context, depth, "Tokyo", NUMBER, ANSWERS[kind][0],
                     score_answer(ANSWERS[kind][0], NUMBER), depth)
        for (context, depth), kinds in cells.items()
        for kind in kinds
    ]  # fmt: skip
    random.Random(seed).shuffle(records)
    for key in ("context", "depth"):
        seen = list(dict.fromkeys(getattr(r, key) for r in records))
        assert len(seen) == 1 or seen != sorted(seen), f"pick another seed: {key}s arrive sorted"
    return records


def stage_outputs(records: list[NeedleRecord]) -> dict[str, Any]:
    """eval_niah's summary of these records, through JSON as the report reads it from the done
    record."""
    return json.loads(json.dumps(niah_summary(records, N)))


def niah_mean(summary: dict[str, Any], beyond: float | None) -> float | None:
    """The mean past `beyond` of eval_niah's outputs with this summary (the claim's metric)."""
    return outputs("eval_niah", summary).mean_accuracy(beyond)


def approx_grid(grid: list[list[float]]) -> list[Any]:
    return [pytest.approx(row, abs=1e-12) for row in grid]


@pytest.mark.parametrize("kind", ANSWERS)
def test_hand_answers_score_as_labelled(kind: str) -> None:
    answer, score = ANSWERS[kind]
    assert score_answer(answer, NUMBER) == score


def test_full_and_loose_grids() -> None:
    records = records_of(CELLS)
    assert len(records) == 22
    contexts, depths, full = accuracy_grid(records, "full")
    assert contexts == CONTEXTS and depths == DEPTHS
    assert full.tolist() == approx_grid(FULL_GRID)
    contexts, depths, loose = accuracy_grid(records, "first_digit")
    assert contexts == CONTEXTS and depths == DEPTHS
    assert loose.tolist() == approx_grid(LOOSE_GRID)
    assert accuracy_grid(records)[2].tolist() == full.tolist()  # "full" is the default


def test_grid_does_not_depend_on_record_order() -> None:
    grids = [accuracy_grid(records_of(CELLS, seed), "full")[2].tolist() for seed in (1, 2, 4)]
    assert grids[0] == grids[1] == grids[2]


def test_repeated_and_unsorted_contexts_pool_into_one_sorted_row() -> None:
    """Records of one cell arriving in several runs count as one cell with every sample."""
    first = records_of({(512, 0.5): "FD", (128, 0.5): "W", (256, 0.5): "F"})
    again = records_of({(512, 0.5): "WWF", (128, 0.5): "F", (256, 0.5): "D"}, seed=3)
    contexts, depths, grid = accuracy_grid(first + again, "full")
    assert contexts == [128, 256, 512] and depths == [0.5]
    assert grid.tolist() == approx_grid([[1 / 2], [1 / 2], [2 / 5]])


def test_an_unmeasured_cell_is_nan_not_zero() -> None:
    records = records_of({(256, 0.9): "F", (128, 0.1): "D", (256, 0.1): "W"}, seed=0)
    _, _, grid = accuracy_grid(records, "first_digit")
    assert grid[0, 0] == 1 and math.isnan(grid[0, 1]) and grid[1, 0] == 0 and grid[1, 1] == 1


def test_stage_outputs_per_multiple_accuracy() -> None:
    out = stage_outputs(records_of(CELLS))
    assert out["context_multiples"] == MULTIPLES and out["depths"] == DEPTHS
    assert out["accuracy"] == pytest.approx(FULL_AT, abs=1e-12)
    assert out["first_digit_accuracy"] == pytest.approx(LOOSE_AT, abs=1e-12)
    assert out["accuracy_grid"] == approx_grid(FULL_GRID)
    assert out["first_digit_accuracy_grid"] == approx_grid(LOOSE_GRID)


def test_a_multiple_is_named_by_its_records_context() -> None:
    """Multiples 1.5x and 0.5x (contexts 192, 64) keep their own rows and names."""
    cells = {(192, 0.5): "FW", (192, 0.1): "W", (64, 0.5): "F", (64, 0.1): "W"}
    out = stage_outputs(records_of(cells, seed=3))
    assert out["context_multiples"] == [0.5, 1.5] and out["depths"] == [0.1, 0.5]
    assert out["accuracy"] == pytest.approx({"0.5": 1 / 2, "1.5": 1 / 4})
    assert out["accuracy_grid"] == approx_grid([[0, 1], [0, 1 / 2]])


def test_niah_claim_metric_is_the_mean_past_1x() -> None:
    table = stage_outputs(records_of(CELLS))
    all_full = stage_outputs(records_of({cell: "F" * len(k) for cell, k in CELLS.items()}))
    none_past_1x = {cell: kinds if cell[0] == N else "W" * len(kinds)
                    for cell, kinds in CELLS.items()}  # fmt: skip
    softmax = stage_outputs(records_of(none_past_1x))
    assert niah_mean(table, beyond=1) == pytest.approx(NIAH_PAST_1X, abs=1e-12)
    assert niah_mean(table, beyond=None) == pytest.approx(7 / 18, abs=1e-12)  # every multiple
    assert niah_mean(table, beyond=2) == pytest.approx(4 / 9, abs=1e-12)
    assert niah_mean({}, beyond=1) is None

    inputs = {
        "eval_niah/b_ssmax/seed0": table,
        "eval_niah/b_ssmax/seed1": all_full,
        "eval_niah/a_softmax/seed0": softmax,
        "eval_loss/b_ssmax/seed0": {"loss_at": {"2": 3.0}},  # another stage: not NIAH
    }
    results = Results.from_inputs(typed(inputs), Settings("test", [0, 1], N))
    assert values_of(results, "niah", "b_ssmax") == pytest.approx({0: NIAH_PAST_1X, 1: 1.0})
    assert values_of(results, "niah", "a_softmax") == {0: 0.0}  # its 1x answers do not count
    assert values_of(results, "niah@1", "a_softmax") == pytest.approx({0: 1 / 3})
    assert values_of(results, "niah@2", "b_ssmax") == pytest.approx({0: 7 / 18, 1: 1.0})
    assert values_of(results, "niah@4", "b_ssmax") == pytest.approx({0: 4 / 9, 1: 1.0})
    assert values_of(results, "niah@8", "b_ssmax") == {}


def test_niah_claim_metric_without_rows_past_1x_or_a_grid_is_none() -> None:
    only_1x = stage_outputs(records_of({(N, 0.5): "FD", (N, 0.1): "W"}))
    assert only_1x["context_multiples"] == [1]
    assert niah_mean(only_1x, beyond=1) is None  # nothing past the training length: no mean
    assert niah_mean({"context_multiples": MULTIPLES}, beyond=1) is None  # no grid recorded
    short = {"context_multiples": MULTIPLES, "accuracy_grid": FULL_GRID[:2]}
    with pytest.raises(ValueError):  # a row short: rows are not named by position
        niah_mean(short, beyond=1)
