"""Executors: the same NodeJobs in this process (ssmax.pipeline.inprocess), in local worker
processes side by side (ssmax.pipeline.local), or as SLURM jobs (ssmax.pipeline.slurm), behind
one interface, and the one runner over them.

An executor is called as executor(jobs, cfg, log, parent) and returns {node name: state},
state one of cached | done | failed | blocked (an input failed, so the node did not run), or
queued | running for SLURM jobs it did not wait for (executor.wait=false). `parent` is the
invocation's MLflow run (ssmax.pipeline.mlflow_runs.ParentRun): the nodes' runs are its children.
"""

from __future__ import annotations

import time

from omegaconf import DictConfig

from ssmax.pipeline.bundle.group import bundled
from ssmax.pipeline.inprocess import FINISHED, Log, run_inprocess
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.local import run_local
from ssmax.pipeline.mlflow_runs import ParentRun
from ssmax.pipeline.plan_cost import NodeCost, downstream_flops, plan_costs
from ssmax.pipeline.slurm import run_slurm
from ssmax.stages.spec import stage_spec
from ssmax.tracking.store import ensure_experiment, is_server, tracking_uri
from ssmax.tracking.ui import training_view

IN_FLIGHT = ("queued", "running")  # SLURM jobs left to run after the command returns


EXECUTORS = {"inprocess": run_inprocess, "local": run_local, "slurm": run_slurm}


def run_pipeline(
    cfg: DictConfig,
    jobs: list[NodeJob],
    overrides: list[str],
    log: Log,
    costs: list[NodeCost] | None = None,
) -> int:
    """Run the planned jobs with cfg.executor.kind's executor under one MLflow parent run; the
    exit status: 0, or 1 when a node failed or was blocked. costs: plan_costs of these jobs,
    where the caller has them (only their FLOPs are read here: the config's, not the disk's)."""
    start = time.perf_counter()
    costs = plan_costs(cfg, jobs) if costs is None else costs
    remaining = downstream_flops(costs)
    for job, cost in zip(jobs, costs, strict=True):
        # its done record keeps them: what later seeds cost (plan); None where its stage
        # declares no cost
        job.flops = None if cost.undeclared else cost.flops
        job.remaining = remaining[job.name]
    parent = ParentRun(cfg)
    units = bundled(cfg, jobs, log)  # executor.bundle: seeds of a variant as one job
    states = EXECUTORS[cfg.executor.kind](units, cfg, log, parent)
    if any(s in IN_FLIGHT for s in states.values()):  # SLURM, not waited for: a job closes it
        log(f"watch: python -m ssmax.pipeline status {' '.join(overrides)}")
        return 0
    parent.close(jobs, states)
    counts = {s: list(states.values()).count(s) for s in ("cached", "done", "failed", "blocked")}
    log(f"\n{len(jobs)} nodes: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    log(f"wall time: {time.perf_counter() - start:.1f} s")
    for job in jobs:  # what a stage declares it shows (StageSpec.shows): the report's page
        shows = stage_spec(job.module).shows
        if shows and states.get(job.name) in FINISHED:
            first, *lines = (job.done["outputs"].get(name, []) for name in shows)
            log(f"{job.stage}: {first}")
            for line in (line for more in lines for line in more):
                log(f"  {line}")
    uri, tracked = tracking_uri(cfg), cfg.tracking.enabled
    if tracked and is_server(uri):  # the experiment: this run's, else (SLURM's) asked once
        log(f"browse: open {training_view(uri, parent.experiment_id or ensure_experiment(cfg))}")
    elif tracked:
        log(f"browse: make mlflow-ui OUTPUT_DIR={cfg.paths.output_dir}")
    return 1 if counts["failed"] or counts["blocked"] else 0
