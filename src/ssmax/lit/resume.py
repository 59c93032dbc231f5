"""What makes a killed training run resumable without traces of the kill.

- Checkpoints are written to a temporary file and renamed: a kill mid-write leaves the last
  good checkpoint, never a truncated one.
- A resumed run drops the metric steps its MLflow run already holds: each step once, no gap.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None
    ) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(checkpoint, tmp)
        os.replace(tmp, path)


class ResumableMLFlowLogger(MLFlowLogger):
    """An MLFlowLogger that, reopening a run, drops the values of steps the run already has.

    A run killed after its last checkpoint has logged a few steps past it; resumed, it trains
    those steps again (deterministically, the same values) and would log them twice. Keeping
    the first copy gives one value per step, with no gap.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._logged_through: dict[str, int] = {}
        if kwargs.get("run_id"):
            client, run_id = self.experiment, kwargs["run_id"]
            for key in client.get_run(run_id).data.metrics:
                steps = [m.step for m in client.get_metric_history(run_id, key)]
                self._logged_through[key] = max(steps, default=-1)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if step is not None:
            metrics = {k: v for k, v in metrics.items() if step > self._logged_through.get(k, -1)}
        if metrics:
            super().log_metrics(metrics, step)
