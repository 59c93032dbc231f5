"""What a verdict is decided on: a run's results, by stage, variant and seed (the report
node's inputs, each node's outputs as its stage's declared type, ssmax.stages.outputs) or as a
table shaped as the report's results.json (a published file, verdicts.published_file), with the
run's settings and its preset's design criteria (report.gather reads the files and histories
the outputs point to).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ssmax.config.variants import ordered


@dataclass(frozen=True)
class Design:
    """preset.design (config.schema.DesignConfig): its seeds and thresholds (verdicts.design)."""

    seeds: tuple[int, ...]
    niah_at_1x: float  # every variant's mean NIAH at 1x (theta x50) at least this
    falls_below: float  # the best variant's mean NIAH at the largest context below this


@dataclass
class Settings:
    preset: str
    seeds: list[int]
    train_len: int  # N, the training sequence length
    tracking_uri: str | None = None  # None: no learning curves (Fig. 4)
    details: dict[str, str] = field(default_factory=dict)  # shown as the report's settings
    variants: list[str] = field(default_factory=list)  # the pipeline's; [] = every variant
    design: Design | None = None  # the preset's design criteria (verdicts.design)
    # what the run ran on, a line each ("Warning: ..." stands out); `python -m ssmax.report`
    # fills it from the MLflow runs (report.__main__.manifest_lines); [] = no such section
    manifest: list[str] = field(default_factory=list)
    # per node: peak memory, GPU use (report.system_table, `python -m ssmax.report`); []: none
    system: list[list[str]] = field(default_factory=list)


Table = dict[str, dict[str, dict[int, float]]]  # variant -> metric -> seed -> value


@dataclass
class Results:
    settings: Settings
    # stage (as reported) -> variant -> seed -> that node's outputs (its stage's Outputs)
    nodes: dict[str, dict[str, dict[int, Any]]]
    # instead of nodes: values as results.json holds them (verdicts.metrics reads either), and
    # the metrics it lacks -> why (a published file: report.published)
    table: Table | None = None
    absent: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_inputs(cls, inputs: dict[str, Any], settings: Settings) -> Results:
        nodes: dict[str, dict[str, dict[int, Any]]] = defaultdict(dict)
        for name, outputs in inputs.items():
            stage, variant, seed = name.split("/")  # stage: as the stage reports it (SPEC)
            nodes[stage].setdefault(variant, {})[int(seed.removeprefix("seed"))] = outputs
        return cls(settings, dict(nodes))

    def without(self, seeds: Sequence[int]) -> Results:
        """The same results with these seeds left out (verdicts.design: the seeds where a
        variant did not form the skill, whose verdicts are shown without them beside)."""
        drop = set(seeds)
        nodes = {st: {v: {s: o for s, o in by.items() if s not in drop} for v, by in vs.items()}
                 for st, vs in self.nodes.items()}  # fmt: skip
        table = None if self.table is None else {
            v: {m: {s: x for s, x in by.items() if s not in drop} for m, by in ms.items()}
            for v, ms in self.table.items()}  # fmt: skip
        kept = [s for s in self.settings.seeds if s not in drop]
        return Results(replace(self.settings, seeds=kept), nodes, table, self.absent)

    def get(self, stage: str, variant: str) -> dict[int, Any]:
        """seed -> outputs of that stage's node for the variant ({} if none)."""
        return dict(sorted(self.nodes.get(stage, {}).get(variant, {}).items()))

    def variants(self, stage: str) -> list[str]:
        return ordered([v for v, runs in self.nodes.get(stage, {}).items() if runs])

    def first(self, stage: str, variant: str) -> tuple[int, Any] | None:
        """The lowest seed's outputs, for the figures that show one seed."""
        runs = self.get(stage, variant)
        return next(iter(runs.items()), None)
