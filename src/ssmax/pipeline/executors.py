"""Executors: the same NodeJobs in this process, or in local subprocesses side by side.

Each returns {node name: state}, state one of cached | done | failed | blocked (an input
failed, so the node did not run).
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from ssmax.pipeline.run import NodeJob, execute_node
from ssmax.pipeline.slurm import run_slurm  # one SLURM job per node; the CLI uses slurm.run_cli

Log = Callable[[str], None]
FINISHED = ("cached", "done")


def _blocked(job: NodeJob, states: dict[str, str]) -> bool:
    return any(states.get(i) in ("failed", "blocked") for i in job.input_dirs)


def run_inprocess(jobs: list[NodeJob], cfg: DictConfig, log: Log) -> dict[str, str]:
    states: dict[str, str] = {}
    for job in jobs:  # inputs come first
        if job.done is not None:
            states[job.name] = "cached"
        elif _blocked(job, states):
            states[job.name] = "blocked"
        else:
            log(f"run     {job.name}")
            try:
                record = execute_node(job)
            except Exception:  # one node's failure must not lose the others' work
                log(f"FAILED  {job.name}\n{traceback.format_exc(limit=-3)}")
                states[job.name] = "failed"
            else:
                states[job.name] = "done"
                log(f"done    {job.name} ({record['wall_s']:.1f} s)")
    return states


def run_local(jobs: list[NodeJob], cfg: DictConfig, log: Log) -> dict[str, str]:
    """Up to executor.workers nodes at once, each in its own process (submitit's local
    executor); a node starts as soon as its inputs are finished."""
    import submitit

    workers = int(cfg.executor.workers)
    executor = submitit.AutoExecutor(
        folder=Path(cfg.paths.output_dir) / "pipeline" / "submitit", cluster="local"
    )
    executor.update_parameters(timeout_min=int(cfg.executor.timeout_min))
    threads = max(1, (len(os.sched_getaffinity(0)) // workers))
    states = {job.name: "cached" for job in jobs if job.done is not None}
    pending = [job for job in jobs if job.name not in states]
    running: dict[str, submitit.Job] = {}
    while pending or running:
        for job in list(pending):
            if _blocked(job, states):
                states[job.name] = "blocked"
                pending.remove(job)
            elif len(running) < workers and all(states.get(i) in FINISHED for i in job.input_dirs):
                job.threads = threads
                running[job.name] = executor.submit(execute_node, job)
                pending.remove(job)
                log(f"run     {job.name} (job {running[job.name].job_id})")
        for name, sjob in list(running.items()):
            if not sjob.done():
                continue
            del running[name]
            try:
                record = sjob.result()
            except Exception as err:  # submitit re-raises the worker's failure
                states[name] = "failed"
                log(f"FAILED  {name}: {str(err).strip().splitlines()[-1]}")
            else:
                states[name] = "done"
                log(f"done    {name} ({record['wall_s']:.1f} s)")
        time.sleep(0.2)
    return states


EXECUTORS = {"inprocess": run_inprocess, "local": run_local, "slurm": run_slurm}
