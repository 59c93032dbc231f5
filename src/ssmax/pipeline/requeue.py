"""A training node as a requeueable SLURM job: submitit's checkpointing owns the signal.

On a time-out (SLURM sends USR2 `executor.signal_delay_s` before the limit) or a preemption
(`scancel --signal USR2`, submitit's `job._interrupt()`), submitit's handler calls
`TrainingNode.checkpoint`, requeues the job (`scontrol requeue`) and exits. Before that,
ssmax.lit.resume holds the signal until the current optimizer step ends and writes
checkpoints/last.ckpt there; the requeued job runs `TrainingNode()` again, which resumes from
that checkpoint (same MLflow run, same data order: ssmax.lit.trainer). Lightning's own SLURM
auto-requeue is off (ssmax.lit.trainer.plugins), so nothing else requeues the job.

A node requeued `executor.max_requeues` times fails at the next signal with one line saying
so, instead of going round for ever (SLURM counts the restarts in SLURM_RESTART_COUNT).
"""

from __future__ import annotations

import os
from typing import Any

from submitit.core.job_environment import JobEnvironment
from submitit.core.utils import DelayedSubmission
from submitit.helpers import Checkpointable

from ssmax.lit.resume import DeferredSignal
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.run import execute_node


class RequeueLimitError(RuntimeError):
    """The node was requeued executor.max_requeues times already."""


def restart_count() -> int:
    """How many times SLURM has requeued this job (0 for its first run)."""
    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)


class TrainingNode(Checkpointable):
    """The job callable of a training node (pretrain, switch, sft) under executor=slurm."""

    def __init__(self, job: NodeJob, max_requeues: int) -> None:
        self.job, self.max_requeues = job, max_requeues

    def __call__(self) -> dict[str, Any]:
        done = self.job.done
        if done is not None:  # requeued after its done-marker was written: nothing left to do
            return done
        count = restart_count()
        if count > self.max_requeues:  # requeued by someone else (scontrol requeue, node fault)
            raise RequeueLimitError(self._limit_message(count))
        with DeferredSignal(JobEnvironment._usr_sig()):
            return execute_node(self.job)

    def checkpoint(self) -> DelayedSubmission:
        """Called by submitit's signal handler once the checkpoint is written (at a step
        boundary, or before/after training where nothing is half done): what to requeue."""
        count = restart_count()
        if count >= self.max_requeues:
            raise RequeueLimitError(self._limit_message(count))
        return DelayedSubmission(self)

    def _limit_message(self, count: int) -> str:
        return (
            f"{self.job.name}: not requeued again: already requeued {count} times, "
            f"executor.max_requeues={self.max_requeues} (the last checkpoint is kept: re-run "
            "the pipeline to resume from it)"
        )
