"""A test hook for training faults, set as a real callback through the config:
trainer.callbacks=[{_target_:tests.faults.PoisonAt,step:15}]."""

from __future__ import annotations

import os
import signal

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

    def on_bundle_step(self, folder: object, step: int) -> None:
        """In a bundle of seeds (ssmax.pipeline.bundle.train): once `step` steps are taken."""
        if step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class FailSFT(L.Callback):
    """An SFT node fails where it runs (a SLURM job, a worker), after planning passed: its
    fit raises as it starts. Pretraining, which shares trainer.callbacks, runs on."""

    def on_fit_start(self, trainer: L.Trainer, lit: L.LightningModule) -> None:
        if getattr(lit, "objective", None) == "sft":
            raise RuntimeError("tests.faults.FailSFT: this SFT node fails on purpose")
