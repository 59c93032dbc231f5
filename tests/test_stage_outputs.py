"""Typed stage outputs (ssmax.stages.outputs): every stage declares its type, its done record
holds it as the dicts did, and reading a key a stage does not write is an error at the reader
(the record's reader, the report's table, a claim's metric), never a silent None."""

from __future__ import annotations

import dataclasses
import inspect
import json
from types import SimpleNamespace
from typing import Any

import pytest

from ssmax.pipeline.run import close_node
from ssmax.report.table import gather
from ssmax.stages import eval_loss, eval_niah, export, pretrain, rope, sft
from ssmax.stages.outputs import OutputsError, read_outputs, to_record
from ssmax.stages.report import declared
from ssmax.stages.spec import stage_module, stage_modules, stage_spec
from ssmax.verdicts.metrics import values_of
from ssmax.verdicts.results import Results, Settings

NEEDLE = eval_niah.NeedleScores(
    context=256, depth=0.5, city="Tokyo", number="8106422", map_csv="m.csv",
    trials_json="t.json", map_max=0.4, trials=2, top_mean=0.3, top_median=0.3, full=0.5,
    first_digit=0.0,
)  # fmt: skip
NIAH = eval_niah.Outputs(
    records="r.jsonl", accuracy={"1": 1.0, "2": 0.5}, accuracy_grid=[[1.0], [0.5]],
    first_digit_accuracy={"1": 1.0, "2": 0.5}, first_digit_accuracy_grid=[[1.0], [0.5]],
    context_multiples=[1, 2], depths=[0.5], needle_scores=NEEDLE,
    copy=eval_niah.CopyProbe(first=3.0, repeat=1.0, gain=2.0),
)  # fmt: skip
LOSS = eval_loss.Outputs(loss_at={"1": 3.0, "4": 4.0}, csv="l.csv", rope_theta=5e5,
                         base_theta_loss_at_1x=2.9)  # fmt: skip
EXAMPLES: dict[str, Any] = {  # stage module -> outputs as its run returns them
    "pretrain": pretrain.Outputs(
        weights="w.pt",
        train_loss=4.0,
        val_loss=4.1,
        run_id="r",
        switch_point="s.pt",
        switch_data="d.json",
        switch_step=18,
        steps=20,
    ),  # fmt: skip
    "sft": sft.Outputs(weights="w.pt", inherited=True),
    "rope": rope.Outputs(weights="w.pt", rope_factor=50.0, rope_theta=5e5),
    "eval_loss": LOSS,
    "eval_niah": NIAH,
    "export": export.Outputs(models={"sft": "hf/sft"}),
}


def record(module: str, outputs: dict[str, Any]) -> dict[str, Any]:
    return {"node": f"{module}/b_ssmax/seed0", "module": module, "outputs": outputs}


def test_every_stage_declares_the_frozen_dataclass_its_run_returns() -> None:
    modules = stage_modules()
    assert {"pretrain", "switch", "sft", "rope", "eval_loss", "eval_niah", "export",
            "report"} <= set(modules)  # fmt: skip
    for module in modules:
        declared_type = stage_spec(module).outputs
        assert dataclasses.is_dataclass(declared_type), module
        assert declared_type.__dataclass_params__.frozen, module  # type: ignore[attr-defined]
        run = inspect.signature(stage_module(module).run).return_annotation
        assert run == declared_type.__name__ == "Outputs", module  # its own module's type


@pytest.mark.parametrize("module", list(EXAMPLES))
def test_a_record_reads_back_as_its_stage_wrote_it(module: str) -> None:
    """to_record -> JSON (done.json) -> read_outputs gives the same outputs, nested types too."""
    written = json.loads(json.dumps(to_record(EXAMPLES[module])))
    assert read_outputs(module, record(module, written)) == EXAMPLES[module]


def test_the_record_keeps_the_shape_the_dicts_had() -> None:
    """A field off by default (omitted) is left out until the node computes it; nested types
    are plain dicts in the record."""
    assert "facts_loss_at" not in to_record(LOSS) and "facts_csv" not in to_record(LOSS)
    assert to_record(dataclasses.replace(LOSS, facts_csv="f.csv"))["facts_csv"] == "f.csv"
    niah = to_record(NIAH)
    assert niah["needle_scores"]["top_mean"] == 0.3 and niah["copy"] == {
        "first": 3.0, "repeat": 1.0, "gain": 2.0}  # fmt: skip
    assert "base_theta_accuracy" not in niah
    assert "inherited" not in to_record(sft.Outputs(weights="w.pt"))
    # an older record, made before the key was written: read with the field's default
    old = {"weights": "w.pt", "train_loss": 1.0, "val_loss": 1.0, "run_id": None,
           "switch_point": "s.pt", "switch_step": 1, "steps": 2}  # fmt: skip
    assert read_outputs("pretrain", record("pretrain", old)).switch_data is None
    assert read_outputs("export", record("export", {"models": {}})).registered == {}


def test_a_record_without_a_key_its_stage_declares_is_an_error_naming_node_stage_and_key() -> None:
    values = to_record(EXAMPLES["rope"])
    del values["rope_theta"]
    with pytest.raises(OutputsError) as err:
        read_outputs("rope", record("rope", values))
    assert str(err.value) == ("rope/b_ssmax/seed0 (ssmax.stages.rope): its outputs lack "
                              "rope_theta (ssmax.stages.rope.Outputs)")  # fmt: skip
    with pytest.raises(OutputsError, match=r"have theta, which it does not declare"):
        read_outputs("rope", record("rope", to_record(EXAMPLES["rope"]) | {"theta": 1.0}))
    niah = to_record(NIAH)
    del niah["needle_scores"]["top_mean"]  # nested: named with its field
    with pytest.raises(OutputsError, match=r"seed0 \(ssmax.stages.eval_niah\), needle_scores: "):
        read_outputs("eval_niah", record("eval_niah", niah))


def test_a_reader_asking_for_a_key_the_stage_does_not_write_fails_not_none() -> None:
    """The report's table and a claim's metric read fields; one the stage does not write is an
    AttributeError where it is read (before: a dict's .get gave None, an empty cell)."""
    inputs = {"eval_loss/b_ssmax/seed0": LOSS}
    assert gather(inputs, declared().columns)["b_ssmax"]["loss @4x"] == {0: 4.0}
    with pytest.raises(AttributeError, match="accuracy"):
        gather(inputs, {"eval_loss": lambda out: {"niah @1x": out.accuracy}})
    # a metric read from the wrong stage's outputs (the niah claim on eval_loss's)
    results = Results.from_inputs({"eval_niah/b_ssmax/seed0": LOSS}, Settings("t", [0], 64))
    with pytest.raises(AttributeError, match="mean_accuracy"):
        values_of(results, "niah", "b_ssmax")
    with pytest.raises(AttributeError):  # a downstream stage's read of its input
        _ = EXAMPLES["rope"].switch_step


def test_the_engine_refuses_a_run_that_returns_a_dict() -> None:
    """The done record is written from the declared type only: a stage whose run returns a
    plain dict fails the node (its MLflow run marked failed), naming the stage."""
    failed: list[BaseException] = []
    job = SimpleNamespace(name="rope/b_ssmax/seed0", module="rope")
    tracked = SimpleNamespace(failed=failed.append)
    with pytest.raises(TypeError, match=r"ssmax.stages.rope.run returned dict, not its SPEC"):
        close_node(job, tracked, to_record(EXAMPLES["rope"]), None, 0.0)  # type: ignore[arg-type]
    assert len(failed) == 1
