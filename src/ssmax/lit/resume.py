"""What makes a killed training run resumable without traces of the kill.

- Checkpoints are written to a temporary file and renamed: a kill mid-write leaves the last
  good checkpoint, never a truncated one.
- A resumed run drops the metric steps its MLflow run already holds: each step once, no gap.
- Under a requeueing job (submitit), the preemption signal waits for the end of the current
  optimizer step (DeferredSignal, StepBoundary): the checkpoint it leads to is a consistent one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import lightning as L
from lightning.pytorch.loggers import MLFlowLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ssmax.files.atomic import atomic_torch_save, atomic_write_json
from ssmax.tracking.client import Client
from ssmax.tracking.liveness import CLOSED, process_tags

REQUEUE_RECORD = "requeue.json"  # in the run folder: when the signal came, when training resumed


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None
    ) -> None:
        atomic_torch_save(checkpoint, path)


class ResumableMLFlowLogger(MLFlowLogger):
    """An MLFlowLogger that, reopening a run, drops the values of steps the run already has.

    A run killed after its last checkpoint has logged a few steps past it; resumed, it trains
    those steps again (deterministically, the same values) and would log them twice. Keeping
    the first copy gives one value per step, with no gap.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the project's client: a write that loses a race to another node finds the winner's
        self._mlflow_client = Client(self._tracking_uri)
        self._logged_through: dict[str, int] = {}
        if kwargs.get("run_id"):
            client, run_id = self.experiment, kwargs["run_id"]
            client.update_run(run_id, status="RUNNING")  # it was KILLED (requeued) or left RUNNING
            for key, value in process_tags().items():  # this process ends it now
                client.set_tag(run_id, key, value)
            if CLOSED in client.get_run(run_id).data.tags:  # closed as dead, alive again
                client.delete_tag(run_id, CLOSED)
            for key in client.get_run(run_id).data.metrics:
                steps = [m.step for m in client.get_metric_history(run_id, key)]
                self._logged_through[key] = max(steps, default=-1)

    def finalize(self, status: str = "success") -> None:
        super().finalize(end_status(status))

    def unlogged(self, metrics: Mapping[str, float], step: int | None) -> dict[str, float]:
        """The metrics of `step` the run does not hold yet (all of them without a step)."""
        if step is None:
            return dict(metrics)
        return {k: v for k, v in metrics.items() if step > self._logged_through.get(k, -1)}

    def next_step(self, prefix: str) -> int:
        """The step after the last one the run holds of the metrics named prefix... (0: none),
        where a resumed run's own counter goes on (its system metrics)."""
        held = [s for k, s in self._logged_through.items() if k.startswith(prefix)]
        return max(held, default=-1) + 1

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        metrics = self.unlogged(metrics, step)
        if metrics:
            super().log_metrics(metrics, step)


# ---------------------------------------------------------------- preemption at step boundaries

_active: DeferredSignal | None = None


def active_deferral() -> DeferredSignal | None:
    """The DeferredSignal of this process while a requeueing job runs (ssmax.pipeline.requeue)."""
    return _active


def end_status(status: str) -> str:
    """The status a logger ends its run with. Lightning finalizes with "failed" on any
    exception, the requeue's exit and a stop by SIGTERM included: those runs are KILLED (the
    next job, or the same command, goes on from their checkpoint), not FAILED. Lightning
    finalizes inside its handler of the exception, which sys.exc_info() names."""
    if status != "failed":
        return status
    deferred = active_deferral()
    if deferred is not None and deferred.requeued:
        return "KILLED"
    if isinstance(sys.exc_info()[1], SIGTERMException):
        return "KILLED"
    return status


class DeferredSignal:
    """Hold a signal (submitit's USR2: checkpoint, requeue, exit) until training is at an
    optimizer-step boundary.

    Python runs a signal handler in the main thread at whatever bytecode it interrupts, possibly
    half-way through an optimizer step; a checkpoint saved there would mix two steps. Inside
    `with DeferredSignal(sig)` our handler notes the signal; while a model trains (`deferring`,
    set by StepBoundary) it waits for StepBoundary, which saves a checkpoint at the next step
    boundary and calls `dispatch`. Outside training (data preparation, final validation) nothing
    is half done: the signal goes through at once. `dispatch` hands it to the handler that was
    installed before (submitit's), which requeues the job and exits.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.handler: Callable[[int, FrameType | None], Any] | int | None = None
        self.received_at: float | None = None  # time.time() of the signal not yet dispatched
        self.deferring = False
        self.requeued = False  # the handler requeued the job and is exiting

    def __enter__(self) -> DeferredSignal:
        global _active
        self.handler = signal.getsignal(self.signum)
        signal.signal(self.signum, self._note)
        _active = self
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        global _active
        _active = None
        if self.handler is not None:
            signal.signal(self.signum, self.handler)

    @property
    def pending(self) -> bool:
        return self.received_at is not None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        print(f"signal {signal.Signals(signum).name} received"
              f"{': held until the current optimizer step ends' if self.deferring else ''}",
              file=sys.stderr, flush=True)  # fmt: skip
        self.received_at = self.received_at or time.time()
        if not self.deferring:
            self.dispatch()

    def dispatch(self) -> None:
        """Hand a pending signal to the replaced handler (submitit's requeue and exit)."""
        if self.received_at is None:
            return
        self.received_at = None
        if not callable(self.handler):
            return
        try:
            self.handler(self.signum, None)
        except SystemExit:  # submitit requeued the job and exits the process
            self.requeued = True
            raise
        # A handler that returns (submitit on a rank other than 0): train on until SLURM ends
        # the job step, which the requeue by rank 0 does.


class StepBoundary(L.Callback):
    """Where a held signal is served: after an optimizer step (not after a micro-batch of a
    gradient accumulation), with a checkpoint of that step written first (all ranks take part,
    rank 0 writes). Also owns SIGTERM while training: Lightning's handler would stop the run at
    the next batch, while under submitit SIGTERM only announces the signal that follows.
    Records the signal's time in the run folder; the resumed job logs how long it took to be
    back at its first step (requeue/resume_s)."""

    def __init__(self, deferred: DeferredSignal, checkpoint: Path, run_dir: Path) -> None:
        self.deferred, self.checkpoint = deferred, checkpoint
        self.record = run_dir / REQUEUE_RECORD
        self.sigterm = signal.getsignal(signal.SIGTERM)  # submitit's: log and go on
        self._step = -1
        self._resumed: dict[str, Any] | None = None

    def on_train_start(self, trainer: L.Trainer, lit: L.LightningModule) -> None:
        if callable(self.sigterm):  # Lightning installed its own in fit(), just before this hook
            signal.signal(signal.SIGTERM, self.sigterm)
        self.deferred.deferring = True
        if self.record.exists():
            history = json.loads(self.record.read_text())
            if history and "resumed_at" not in history[-1]:
                self._resumed = history[-1]

    def on_train_batch_start(self, trainer: L.Trainer, *_: object) -> None:
        self._step = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, *_: object) -> None:
        if trainer.global_step == self._step:  # a micro-batch of an accumulation: mid-step
            return
        if self._resumed is not None:
            self._log_resume(trainer)
        self._serve(trainer)

    def on_train_end(self, trainer: L.Trainer, lit: L.LightningModule) -> None:
        self._serve(trainer)  # a signal held through the last step or the last validation
        self.deferred.deferring = False

    def on_exception(self, trainer: L.Trainer, lit: L.LightningModule, err: BaseException) -> None:
        self.deferred.deferring = False

    def _serve(self, trainer: L.Trainer) -> None:
        # Every rank must agree: saving a checkpoint is collective under DDP.
        if not trainer.strategy.reduce_boolean_decision(self.deferred.pending, all=False):
            return
        received = self.deferred.received_at or time.time()
        trainer.save_checkpoint(self.checkpoint)
        if trainer.is_global_zero:
            history = json.loads(self.record.read_text()) if self.record.exists() else []
            history.append(
                {
                    "signal_at": received,
                    "step": trainer.global_step,
                    "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", 0)),
                }
            )
            _write_json(self.record, history)
        print(f"checkpoint at step {trainer.global_step} for the requeue: {self.checkpoint}",
              file=sys.stderr, flush=True)  # fmt: skip
        self.deferred.dispatch()  # rank 0: requeues and exits; the others train on until killed

    def _log_resume(self, trainer: L.Trainer) -> None:
        entry, self._resumed = self._resumed, None
        now = time.time()
        seconds = now - entry["signal_at"]
        print(f"resumed: first step {trainer.global_step} done {seconds:.1f} s after the "
              f"signal at step {entry['step']}", file=sys.stderr, flush=True)  # fmt: skip
        if not trainer.is_global_zero:
            return
        for logger in trainer.loggers:
            logger.log_metrics({"requeue/resume_s": seconds}, trainer.global_step)
        history = json.loads(self.record.read_text())
        history[-1] |= {"resumed_at": now, "resume_s": seconds, "first_step": trainer.global_step}
        _write_json(self.record, history)


def _write_json(path: Path, obj: object) -> None:
    atomic_write_json(path, obj, indent=2)
