"""Training progress (trainer.progress_bar): Rich's bar on a terminal; elsewhere (a node's log
file under the local executor, a SLURM job's output) a line every trainer.progress_every_s
seconds, since Rich draws a bar there only once it is finished: a pretraining would log nothing
until its end."""

from __future__ import annotations

import sys
import time
from typing import Any

import lightning as L


def progress_bar(every_s: float) -> L.pytorch.callbacks.ProgressBar:
    """The bar for where stdout goes: Rich's on a terminal, lines elsewhere."""
    return StepProgressBar() if sys.stdout.isatty() else ProgressLines(every_s)


class StepProgressBar(L.pytorch.callbacks.RichProgressBar):
    """Lightning's rich bar, described by the run's steps: training is set in steps
    (max_epochs=-1), which Lightning's own description shows as "Epoch 0/-2"."""

    def _get_train_description(self, current_epoch: int) -> str:
        return f"train, {self.trainer.max_steps:,} steps"


def _duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}h {m:02d}m" if hours else f"{m}m {s:02d}s"


class ProgressLines(L.pytorch.callbacks.ProgressBar):
    """One line a while on global rank 0, and one at the last step:
    `train step 250/1,500 (17%) · loss 2.314 · 3.42 steps/s · 6m 05s left`. The rate counts the
    steps of this process (a resumed run's own), so the time left holds after a resume."""

    def __init__(self, every_s: float) -> None:
        super().__init__()
        self.every_s = every_s
        self._enabled = True
        self._t0 = self._last = 0.0
        self._step0 = 0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: L.Trainer, *_: Any) -> None:
        self._t0 = self._last = time.monotonic()
        self._step0 = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, _lit: Any, outputs: Any, *_: Any) -> None:
        now, step, total = time.monotonic(), trainer.global_step, trainer.max_steps
        if not (self._enabled and trainer.is_global_zero) or step == self._step0:
            return
        if now - self._last < self.every_s and step < total:
            return
        self._last = now
        rate = (step - self._step0) / max(now - self._t0, 1e-9)
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        parts = [f"train step {step:,}/{total:,} ({step / total:.0%})"]
        if loss is not None:
            parts.append(f"loss {float(loss):.3f}")  # a sync, once a line
        parts.append(f"{rate:.2f} steps/s")
        if step < total:
            parts.append(f"{_duration((total - step) / rate)} left")
        print(" · ".join(parts), flush=True)
