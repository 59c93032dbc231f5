"""The files and histories the report's inputs point to (the inputs themselves, by stage,
variant and seed: verdicts.results.Results): per-position loss, the needle scores, the learning
curves from MLflow. A file or history that is not there gives None (a figure then says what it
lacks); the outputs that name them are typed, a field they lack is an error.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

from ssmax.tracking.store import mlflow_client
from ssmax.tracking.sync import copy_id


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


def read_needle_map(outputs: Any) -> list[tuple[int, int, float]] | None:
    """Fig. 7: (layer, head, score) of eval_niah's needle score map (None: scores off)."""
    if outputs.needle_scores is None:
        return None
    path = outputs.needle_scores.map_csv
    try:
        with open(path, newline="") as fh:
            return [
                (int(r["layer"]), int(r["head"]), float(r["score"])) for r in csv.DictReader(fh)
            ]
    except (OSError, KeyError, ValueError, TypeError):
        return None


def read_needle_trials(outputs: Any) -> list[dict[str, Any]] | None:
    """Fig. 8: one dict per trial (top_score, layer, head, score = outcome, ...); None: scores
    off."""
    if outputs.needle_scores is None:
        return None
    path = outputs.needle_scores.trials_json
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError, TypeError):
        return None
