"""StepTimes: a test callback that records when each optimizer step began and ended, given
to a run as `trainer.callbacks=[{_target_: tests.step_times.StepTimes, path: FILE}]`; at the end
of fit it writes FILE: one [step, began, ended] per step (time.time())."""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L


class StepTimes(L.Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.rows: dict[int, list[float]] = {}

    def on_train_batch_start(self, trainer: L.Trainer, *_: object) -> None:
        self.rows.setdefault(trainer.global_step, [trainer.global_step, time.time(), 0.0])

    def on_train_batch_end(self, trainer: L.Trainer, *_: object) -> None:
        self.rows[trainer.global_step - 1][2] = time.time()  # the step just done

    def on_train_end(self, trainer: L.Trainer, lit: L.LightningModule) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps([self.rows[s] for s in sorted(self.rows)]))


def longest_gap(path: Path, held: list[int], steps: range = range(0, 10**9)) -> float:
    """Seconds, at most, from one step's start to the next's, over the steps in `steps`,
    leaving out the steps after which training was held: the time a step took, with the
    logging, validation and checkpoints Lightning does between steps."""
    rows = json.loads(path.read_text())
    return max(
        b[1] - a[1]
        for a, b in zip(rows, rows[1:], strict=False)
        if a[0] in steps and a[0] + 1 not in held
    )
