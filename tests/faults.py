"""A test hook for training faults, set as a real callback through the config:
trainer.callbacks=[{_target_:tests.faults.PoisonAt,step:15}]."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import lightning as L
import torch


class PoisonAt(L.Callback):
    """Before the optimizer step `step` + 1 (global_step == step), fill the token embedding
    with NaN: that step's loss is NaN, as if training had diverged there."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: L.Trainer, lit: L.LightningModule, *_: object) -> None:
        if trainer.global_step == self.step:
            with torch.no_grad():
                lit.model.tok_emb.weight.fill_(float("nan"))


class KillAt(L.Callback):
    """At the start of step `step` (global_step == step), SIGKILL this process: a crash mid-
    training, nothing closed, nothing flushed, as a lost machine or the OOM killer ends it."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: L.Trainer, *_: object) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class HoldAt(L.Callback):
    """At the start of step `step`, write `marker` and wait there until the process is killed
    from outside (a job cancelled on the cluster): the kill lands mid-training, however fast.
    Once: where the marker exists (a requeued job's second try), training goes on."""

    def __init__(self, step: int, marker: str) -> None:
        self.step, self.marker = step, marker

    def on_train_batch_start(self, trainer: L.Trainer, *_: object) -> None:
        if trainer.global_step == self.step and not Path(self.marker).exists():
            Path(self.marker).write_text("holding")
            while True:
                time.sleep(3600)


class HoldUntil(L.Callback):
    """At the start of step `step`, write `marker` and wait until the file `go` exists; once
    (where the marker exists, training goes on): the test acts while training is held."""

    def __init__(self, step: int, marker: str, go: str) -> None:
        self.step, self.marker, self.go = step, marker, go

    def on_train_batch_start(self, trainer: L.Trainer, *_: object) -> None:
        if trainer.global_step == self.step and not Path(self.marker).exists():
            Path(self.marker).write_text("holding")
            while not Path(self.go).exists():
                time.sleep(0.1)
