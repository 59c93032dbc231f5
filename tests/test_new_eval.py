"""What adding a reported eval takes, measured (docs/development.md, "Where to add"): a toy eval
written as a contributor would, in new files only, run by the pipeline and shown in the
report's results table and figures, with no line of the engine or the report changed.

The files it writes: the eval (ssmax/evals/), its stage (ssmax/stages/: its Outputs, its
columns and figure on its SPEC), its pipeline and, for a figure, the figure's function
(ssmax/report/figures_*.py). An eval with settings of its own adds them to EvalConfig
(config/schema.py), which a test cannot do at run time: this toy reads eval.loss's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import ssmax.evals
import ssmax.report
import ssmax.stages

EVAL = '''"""A toy eval: the root mean square of a model's weights."""

import torch


def weight_rms(model: torch.nn.Module) -> float:
    values = torch.cat([p.detach().double().flatten() for p in model.parameters()])
    return values.pow(2).mean().sqrt().item()
'''

STAGE = '''"""The toy eval on the pretrained model, theta x50 (rope_pretrained's output)."""

from dataclasses import dataclass

from ssmax.evals.toy_rms import weight_rms
from ssmax.stages.context import load_model
from ssmax.stages.costing import StageCost
from ssmax.stages.spec import StageSpec


@dataclass(frozen=True)
class Outputs:
    rms: float
    sequences: int  # a setting it was run with (the toy borrows eval.loss's)


def columns(out: Outputs) -> dict[str, float | None]:
    return {"toy weight rms": out.rms}


SPEC = StageSpec(reads=("seed", "eval.loss.sequences"),
                 uses=("model", "variant", "data", "trainer.accelerator"),
                 reported_as="toy_rms", outputs=Outputs, columns=columns,
                 figures=("figures_toy.fig9",))


def cost(cfg, stage, inputs) -> StageCost:
    return StageCost()


def run(ctx) -> Outputs:
    model = load_model(ctx.cfg, ctx.only_input().weights)
    return Outputs(weight_rms(model), int(ctx.cfg.eval.loss.sequences))
'''

FIGURE = '''"""Fig. 9: the toy eval's weight RMS per variant."""

from ssmax.report.plotting import FigureFile, new_figure, save


def fig9(results, folder):
    rms = {v: o.rms for v in results.variants("toy_rms")
           for o in results.get("toy_rms", v).values()}
    if not rms:
        return FigureFile("fig9", "Fig. 9: weight RMS", missing="no toy_rms results")
    fig, (ax,) = new_figure()
    ax.bar(list(rms), list(rms.values()))
    png, csv = save(fig, folder, "fig9", ["variant", "rms"], rms.items())
    return FigureFile("fig9", "Fig. 9: weight RMS", "The toy eval.", png, csv)
'''

PIPELINE = """variants: [a_softmax]
seeds: [0]
stages: {pretrain: pretrain, switch: switch, rope_pretrained: rope, toy_rms: toy_rms,
         report: report}
start: {scratch: pretrain, from_other: switch}
chain: {rope_pretrained: start, toy_rms: rope_pretrained}
report: {stage: report, reads: [start, toy_rms]}
"""

# the files the addition writes, where its package is: evals/, stages/, report/, pipelines/
WRITTEN = {"evals/toy_rms.py": EVAL, "stages/toy_rms.py": STAGE,
           "report/figures_toy.py": FIGURE, "pipelines/toy.yaml": PIPELINE}  # fmt: skip


@pytest.mark.slow
def test_a_new_eval_reaches_the_report_from_its_own_files(
    tmp_path: Path, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ssmax.pipeline.__main__ import main

    for rel, text in WRITTEN.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for package in (ssmax.evals, ssmax.stages, ssmax.report):  # as if written in src/ssmax/
        folder = str(tmp_path / package.__name__.split(".")[1])
        monkeypatch.setattr(package, "__path__", [*package.__path__, folder])
    toy = ["ssmax.evals.toy_rms", "ssmax.stages.toy_rms", "ssmax.report.figures_toy"]
    out, pipeline = tmp_path / "out", tmp_path / "pipelines" / "toy.yaml"
    try:
        args = [f"pipeline.file={pipeline}", f"paths.output_dir={out}",
                f"paths.cache_dir={shared_cache}", "pipeline.strict_reads=true"]  # fmt: skip
        assert main(["run", "preset=smoke", "tracking.enabled=false", *args]) == 0
    finally:
        for name in toy:
            sys.modules.pop(name, None)
    (report,) = (out / "pipeline" / "nodes" / "report").glob("*/report")
    (node,) = (out / "pipeline" / "nodes" / "toy_rms" / "a_softmax" / "seed0").glob("*/done.json")
    written = json.loads(node.read_text())["outputs"]
    assert set(written) == {"rms", "sequences"} and written["sequences"] == 2  # smoke's
    results = json.loads((report / "results.json").read_text())
    assert results["a_softmax"]["toy weight rms"] == {"0": written["rms"]}
    assert "pretrain val loss" in results["a_softmax"]  # beside the stages there were
    md = (report / "report.md").read_text()
    assert "toy weight rms" in md and "Fig. 9: weight RMS" in md and (report / "fig9.png").exists()
    # 4 files: the eval, its stage, its pipeline, its figure (3 without one; its own settings,
    # in EvalConfig: + config/schema.py)
    assert len(WRITTEN) == 4
