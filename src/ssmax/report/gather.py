"""The report's inputs, by stage, variant and seed, and the files and histories they point to.

Everything the report reads comes from the upstream nodes' outputs (their done records) and,
for the learning curves, from MLflow; a missing piece gives None, never an exception.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ssmax.config.variants import ordered
from ssmax.preflight.weights import read_weights
from ssmax.tracking.store import mlflow_client
from ssmax.tracking.sync import copy_id


@dataclass(frozen=True)
class Design:
    """preset.design (config.schema.DesignConfig): its seeds and thresholds (report.design)."""

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
    design: Design | None = None  # the preset's design criteria (report.design)
    # what the run ran on, a line each ("Warning: ..." stands out); `python -m ssmax.report`
    # fills it from the MLflow runs (report.__main__.manifest_lines); [] = no such section
    manifest: list[str] = field(default_factory=list)
    # per node: peak memory, GPU use (report.system_table, `python -m ssmax.report`); []: none
    system: list[list[str]] = field(default_factory=list)


Table = dict[str, dict[str, dict[int, float]]]  # variant -> metric -> seed -> value


@dataclass
class Results:
    settings: Settings
    # stage -> variant -> seed -> that node's outputs
    nodes: dict[str, dict[str, dict[int, dict[str, Any]]]]
    # instead of nodes: values as results.json holds them (report.metrics reads either), and
    # the metrics it lacks -> why (a published file: report.published)
    table: Table | None = None
    absent: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_inputs(cls, inputs: dict[str, dict[str, Any]], settings: Settings) -> Results:
        nodes: dict[str, dict[str, dict[int, dict[str, Any]]]] = defaultdict(dict)
        for name, outputs in inputs.items():
            stage, variant, seed = name.split("/")  # stage: as the stage reports it (SPEC)
            nodes[stage].setdefault(variant, {})[int(seed.removeprefix("seed"))] = outputs
        return cls(settings, dict(nodes))

    def without(self, seeds: Sequence[int]) -> Results:
        """The same results with these seeds left out (report.design: the seeds where a
        variant did not form the skill, whose verdicts are shown without them beside)."""
        drop = set(seeds)
        nodes = {st: {v: {s: o for s, o in by.items() if s not in drop} for v, by in vs.items()}
                 for st, vs in self.nodes.items()}  # fmt: skip
        table = None if self.table is None else {
            v: {m: {s: x for s, x in by.items() if s not in drop} for m, by in ms.items()}
            for v, ms in self.table.items()}  # fmt: skip
        kept = [s for s in self.settings.seeds if s not in drop]
        return Results(replace(self.settings, seeds=kept), nodes, table, self.absent)

    def get(self, stage: str, variant: str) -> dict[int, dict[str, Any]]:
        """seed -> outputs of that stage's node for the variant ({} if none)."""
        return dict(sorted(self.nodes.get(stage, {}).get(variant, {}).items()))

    def variants(self, stage: str) -> list[str]:
        return ordered([v for v, runs in self.nodes.get(stage, {}).items() if runs])

    def first(self, stage: str, variant: str) -> tuple[int, dict[str, Any]] | None:
        """The lowest seed's outputs, for the figures that show one seed."""
        runs = self.get(stage, variant)
        return next(iter(runs.items()), None)


def read_loss_csv(path: str | Path) -> np.ndarray | None:
    """Per-position loss (index i: context i + 1) from eval_loss's CSV."""
    try:
        with open(path, newline="") as fh:
            return np.array([float(row["loss"]) for row in csv.DictReader(fh)])
    except (OSError, KeyError, ValueError, TypeError):
        return None


def metric_history(
    uri: str | None, run_id: str | None, key: str = "train/loss"
) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps, values) of a run's metric from MLflow, sorted by step; the last value of a
    duplicated step wins (a resumed run logs its steps again)."""
    if not uri or not run_id:
        return None
    from mlflow.exceptions import MlflowException  # lazy: MLflow (~2 s) for Fig. 4's curves only

    client = mlflow_client(uri)
    try:
        history = client.get_metric_history(run_id, key)
        if not history:  # offline: the node's run, merged into the folder's store as a copy
            copied = copy_id(client, run_id)
            history = client.get_metric_history(copied, key) if copied else []
    except MlflowException:
        return None
    by_step = {m.step: m.value for m in sorted(history, key=lambda m: (m.step, m.timestamp))}
    if not by_step:
        return None
    steps = np.array(sorted(by_step))
    return steps, np.array([by_step[s] for s in steps])


def learned_p_n(weights: str | Path | None) -> np.ndarray | None:
    """The rationale model's learned p_n (n = 1..N) from its saved state dict."""
    if not weights or not Path(weights).exists():
        return None

    state = read_weights(weights, key="weights")
    p_n = state.get("p_n")
    return None if p_n is None else p_n.double().numpy()


def read_needle_map(outputs: dict[str, Any]) -> list[tuple[int, int, float]] | None:
    """Fig. 7: (layer, head, score) of eval_niah's needle score map."""
    path = (outputs.get("needle_scores") or {}).get("map_csv")
    try:
        with open(path, newline="") as fh:
            return [
                (int(r["layer"]), int(r["head"]), float(r["score"])) for r in csv.DictReader(fh)
            ]
    except (OSError, KeyError, ValueError, TypeError):
        return None


def read_needle_trials(outputs: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Fig. 8: one dict per trial (top_score, layer, head, score = outcome, ...)."""
    path = (outputs.get("needle_scores") or {}).get("trials_json")
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError, TypeError):
        return None
