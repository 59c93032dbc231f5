"""A Lightning callback for tests: hold training after chosen optimizer steps until the test
says go, and record when each step began and ended.

Given to a run as `trainer.callbacks=[{_target_: tests.hold.HoldAt, folder: DIR, steps: [N]}]`:
after step N it writes DIR/held-N and waits for DIR/go-N, so a test acts on a run at a known
step whatever the machine's speed. At the end of fit it writes DIR/steps.json: one
[step, began, ended, held] per optimizer step (time.time(); `held`: seconds spent waiting).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L

HOLD_LIMIT_S = 900.0  # a test that never says go: fail instead of hanging forever


class HoldAt(L.Callback):
    def __init__(self, folder: str, steps: list[int]) -> None:
        self.folder, self.steps = Path(folder), {int(s) for s in steps}
        self.rows: dict[int, list[float]] = {}

    def on_train_batch_start(self, trainer: L.Trainer, *_: object) -> None:
        self.rows.setdefault(trainer.global_step, [trainer.global_step, time.time(), 0.0, 0.0])

    def on_train_batch_end(self, trainer: L.Trainer, *_: object) -> None:
        step = trainer.global_step  # the optimizer steps done, this one included
        row = self.rows[step - 1]
        row[2] = time.time()
        if step not in self.steps:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"held-{step}").touch()
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not (self.folder / f"go-{step}").exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"HoldAt: no go-{step} in {self.folder}")
            time.sleep(0.1)
        row[3] = time.time() - row[2]

    def on_train_end(self, trainer: L.Trainer, lit: L.LightningModule) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        rows = [self.rows[s] for s in sorted(self.rows)]
        (self.folder / "steps.json").write_text(json.dumps(rows))


def longest_gap(folder: Path) -> float:
    """Seconds, at most, from one step's start to the next's, holds left out: the time a step
    took, with the logging Lightning does between steps."""
    rows = json.loads((folder / "steps.json").read_text())
    return max(b[1] - a[1] - a[3] for a, b in zip(rows, rows[1:], strict=False))
