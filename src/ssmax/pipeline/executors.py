"""Executors: the same NodeJobs in this process, in local subprocesses side by side, or as
SLURM jobs (ssmax.pipeline.slurm), behind one interface, and the one runner over them.

An executor is called as executor(jobs, cfg, log, parent) and returns {node name: state},
state one of cached | done | failed | blocked (an input failed, so the node did not run), or
queued | running for SLURM jobs it did not wait for (executor.wait=false). `parent` is the
invocation's MLflow run (ssmax.pipeline.run.ParentRun): the nodes' runs are its children.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from ssmax.pipeline.run import NodeJob, ParentRun, execute_node
from ssmax.pipeline.slurm import run_slurm

Log = Callable[[str], None]
FINISHED = ("cached", "done")
IN_FLIGHT = ("queued", "running")  # SLURM jobs left to run after the command returns


def _blocked(job: NodeJob, states: dict[str, str]) -> bool:
    return any(states.get(i) in ("failed", "blocked") for i in job.input_dirs)


def _adopt(jobs: list[NodeJob], parent: ParentRun) -> None:
    run_id = parent.id()
    for job in jobs:
        job.parent_run_id = run_id


def run_inprocess(
    jobs: list[NodeJob], cfg: DictConfig, log: Log, parent: ParentRun
) -> dict[str, str]:
    _adopt(jobs, parent)
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


def run_local(jobs: list[NodeJob], cfg: DictConfig, log: Log, parent: ParentRun) -> dict[str, str]:
    """Up to executor.workers nodes at once, each in its own process (submitit's local
    executor); a node starts as soon as its inputs are finished. Inline stages (no compute)
    run here instead: a worker costs ~13 s of process start, MLflow store and imports."""
    import submitit

    _adopt(jobs, parent)
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
            ready = all(states.get(i) in FINISHED for i in job.input_dirs)
            if _blocked(job, states):
                states[job.name] = "blocked"
                pending.remove(job)
            elif ready and job.inline:
                pending.remove(job)  # seconds saved per node: no worker process to start
                states |= run_inprocess([job], cfg, log, parent)
            elif ready and len(running) < workers:
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


def run_pipeline(cfg: DictConfig, jobs: list[NodeJob], overrides: list[str], log: Log) -> int:
    """Run the planned jobs with cfg.executor.kind's executor under one MLflow parent run; the
    exit status: 0, or 1 when a node failed or was blocked."""
    from ssmax.tracking import tracking_uri

    start = time.perf_counter()
    parent = ParentRun(cfg)
    states = EXECUTORS[cfg.executor.kind](jobs, cfg, log, parent)
    if any(s in IN_FLIGHT for s in states.values()):  # SLURM, not waited for: a job closes it
        log(f"watch: python -m ssmax.pipeline status {' '.join(overrides)}")
        return 0
    parent.close(jobs, states)
    counts = {s: list(states.values()).count(s) for s in ("cached", "done", "failed", "blocked")}
    log(f"\n{len(jobs)} nodes: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    log(f"wall time: {time.perf_counter() - start:.1f} s")
    report = next((j for j in jobs if j.variant is None), None)
    if report is not None and states.get(report.name) in FINISHED:
        log(f"report: {report.done['outputs']['report_md']}")
    log(f"browse: mlflow ui --backend-store-uri {tracking_uri(cfg)}")
    return 1 if counts["failed"] or counts["blocked"] else 0
