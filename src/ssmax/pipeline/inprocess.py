"""The in-process executor, and what every executor runs: a job (a node, or seeds of one
bundled), its one call (execute: the same in this process, in a local worker or, for a node,
in a SLURM job), and its nodes' parent, the invocation's MLflow run (adopt).

An executor is called as executor(jobs, cfg, log, parent) and returns {node name: state}
(ssmax.pipeline.executors).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from ssmax.config.compose import ConfigError
from ssmax.pipeline.bundle.evals import execute_evals
from ssmax.pipeline.bundle.group import EVALS, BundleJob, blocked_nodes, nodes_of, settle
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.mlflow_runs import ParentRun
from ssmax.pipeline.progress import Progress
from ssmax.pipeline.run import execute_node
from ssmax.stages.spec import stage_spec

Log = Callable[[str], None]
FINISHED = ("cached", "done")
Job = NodeJob | BundleJob  # a node, or seeds of one bundled (ssmax.pipeline.bundle.group)


def execute(job: Job) -> dict[str, Any]:
    """Run a node (its done record) or a bundle ({"wall_s", "records": node -> record})."""
    if isinstance(job, BundleJob) and stage_spec(job.module).bundle == EVALS:
        return execute_evals(job)
    if isinstance(job, BundleJob):
        # lazy: Lightning and the bundle's training, only where a bundle runs (a worker)
        from ssmax.pipeline.bundle.train import execute_bundle

        return execute_bundle(job)
    return execute_node(job)


def adopt(jobs: list[Job], parent: ParentRun) -> None:
    run_id = parent.id()
    for job in jobs:
        for node in nodes_of(job):
            node.parent_run_id = run_id


def run_inprocess(jobs: list[Job], cfg: DictConfig, log: Log, parent: ParentRun,
                  progress: Progress | None = None) -> dict[str, str]:  # fmt: skip
    """Each job in turn (progress: the caller's, where it runs these among others)."""
    adopt(jobs, parent)
    progress = progress or Progress.of(jobs)
    states: dict[str, str] = {}
    for job in jobs:  # inputs come first
        cut, whole = blocked_nodes(job, states)  # a bundle goes on without its blocked seeds
        states |= cut
        if job.done is not None:
            states[job.name] = "cached"
        elif not whole:
            log(f"run     {job.name}")
            try:
                record = execute(job)
            except ConfigError as err:  # bad input found only once its data is built: one line
                states |= settle(job, "failed")
                log(f"FAILED  {job.name}: {err} ({progress.after(states)})")
            except Exception:  # one node's failure must not lose the others' work
                states |= settle(job, "failed")
                log(
                    f"FAILED  {job.name} ({progress.after(states)})\n"
                    f"{traceback.format_exc(limit=-3)}"
                )
            else:
                states |= settle(job, "done")
                log(f"done    {job.name} ({record['wall_s']:.1f} s; {progress.after(states)})")
    return states
