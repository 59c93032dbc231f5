"""The report node: figures 1-8, the per-variant table and the paper's claims, from every
pretrain/switch, eval_loss and eval_niah node (``ssmax.report``).

Writes everything into report/ in the node's folder; the pipeline logs that folder as
artifacts of its MLflow run. ``python -m ssmax.report`` rebuilds it without re-running nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ssmax.report.declared import Cells, Declared
from ssmax.stages.costing import StageCost
from ssmax.stages.spec import StageSpec, stage_modules, stage_spec
from ssmax.tracking.store import offline
from ssmax.tracking.sync import merge_nodes

if TYPE_CHECKING:  # annotations only: a stage's code is what it runs (pipeline.stage_code)
    from omegaconf import DictConfig

    from ssmax.stages.context import StageContext


@dataclass(frozen=True)
class Outputs:
    """The report's pages, its results table (variant -> column -> seed -> value), the claims'
    verdicts, each figure's PNG (or "n/a: " and why) and the primary claims in lines (none in
    a record of an earlier release)."""

    report_md: str
    report_html: str
    results: dict[str, dict[str, dict[int, float]]]
    claims: dict[str, str]
    figures: dict[str, str]
    primary_claims: list[str] = field(default_factory=list)


# uses: shown in the report's settings (a preset's cuts too; whether its CPU bits are pinned).
# files: the published run its seeds are placed against (verdicts.against; verdicts.published_file)
SPEC = StageSpec(reads=("pipeline.seeds", "pipeline.variants", "preset.design"),
                 uses=("model", "data", "trainer.pretrain", "trainer.sft", "protocol.rope_factor",
                       "eval", "preset.hardware", "trainer.accelerator",
                       "trainer.cpu_isa"),
                 files=("docs/results/verdict_seeds3-10.json",), outputs=Outputs,
                 # the pipeline's run: the report as its artifacts; at its end, the page's path
                 # and the primary claims' verdicts
                 artifacts=("report",), shows=("report_md", "primary_claims"),
                 hosts_closer=True)  # fmt: skip


def cost(cfg: DictConfig, stage: str, inputs: list[str]) -> StageCost:
    """Nothing: no compute, nothing written but its record."""
    return StageCost()  # figures and tables from its inputs' records


def run(ctx: StageContext) -> Outputs:
    # lazy: `plan` imports every stage module (SPEC, cost), and the figures and statistics
    # (matplotlib, scipy) cost ~1.5 s of CPU to import; the local executor's workers still
    # get them preloaded (stage_code follows this import)
    from ssmax.report.build import build_report, settings_from_cfg

    if offline(ctx.cfg) and ctx.cfg.tracking.enabled:  # its curves read the nodes' runs
        merge_nodes(ctx.cfg.paths.output_dir)
    inputs = reported(ctx.inputs, ctx.input_modules)
    folder = ctx.out_dir / "report"
    return Outputs(**build_report(inputs, settings_from_cfg(ctx.cfg), folder, declared()))


def declared() -> Declared:
    """What every reported stage module of ssmax.stages declares for the report: its cells of
    the results table under its reported name (the training stages' columns first, then the
    others' by name), and its figures. Modules that share a name (pretrain, switch) declare
    the same cells."""
    specs = [stage_spec(m) for m in stage_modules()]
    specs = sorted((s for s in specs if s.reported_as), key=lambda s: (not s.trains, s.reported_as))
    columns: dict[str, Cells] = {}
    for spec in specs:
        name, cells = str(spec.reported_as), spec.columns
        if cells is not None and columns.setdefault(name, cells) is not cells:
            raise ValueError(f"the stages reported as {name} declare different columns")
    figures = tuple(dict.fromkeys(f for s in specs for f in s.figures))
    return Declared(columns, figures)


def reported(inputs: dict[str, Any], modules: dict[str, str | None]) -> dict[str, Any]:
    """The nodes' outputs the report reads, each under the name its stage declares
    (StageSpec.reported_as): {"switch/f/seed0": o} -> {"pretrain/f/seed0": o}. modules: node ->
    its stage module (None: unknown, pipeline.state.module_of); a node whose stage declares none
    is left out."""
    out = {}
    for node, outputs in inputs.items():
        spec = stage_spec(modules[node]) if modules[node] else None
        if spec is not None and spec.reported_as is not None:
            out["/".join([spec.reported_as, *node.split("/")[1:]])] = outputs
    return out
