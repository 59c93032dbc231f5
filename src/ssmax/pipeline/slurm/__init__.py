"""SLURM executor: every node that is not cached becomes one sbatch job (submitit).

    run     check the profile, submit each node with `afterok` on its upstream jobs that are not
            done yet, submit one closing job (`afterany` on all of them) that ends the MLflow
            parent run, record the job ids, return. `executor.wait=true` then waits for them.
    status  each node: cached/done, queued/running (job id, SLURM state), failed (log tail),
            blocked (an input failed: SLURM cancelled it, kill_on_invalid_dep), to-run.

Job ids live in <output_dir>/pipeline/slurm_jobs.json, keyed by node name and fingerprint, so
that a re-invocation adopts queued/running jobs instead of submitting them again and resubmits
only nodes whose job ended without a done-marker. A done-marker, not a SLURM state, is what
makes a node finished: the same rule as the other executors.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from omegaconf import DictConfig

from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.mlflow_runs import ParentRun
from ssmax.pipeline.slurm.cluster_profile import check_profile, stage_resources
from ssmax.pipeline.slurm.jobs import (
    NodeStatus,
    _folder,
    book_path,
    log_tail,
    node_states,
    print_status,
    query_states,
    read_book,
    summary,
)  # fmt: skip
from ssmax.pipeline.slurm.submit import _executor, _snapshot_setup, submit, wait

Log = Callable[[str], None]
STATES = ("cached", "done", "failed", "blocked", "queued", "running")


def run_slurm(jobs: list[NodeJob], cfg: DictConfig, log: Log, parent: ParentRun) -> dict[str, str]:
    """The SLURM executor (ssmax.pipeline.executors): submit every node that is not cached,
    with the job that closes the MLflow parent run, and return the nodes as queued/running;
    with executor.wait, wait for every job and return how each ended."""
    start = time.perf_counter()
    check_profile(cfg, jobs)
    sub = submit(cfg, jobs, parent.id)
    if not sub.submitted and not sub.adopted:  # everything cached: like the other executors
        log(f"{len(jobs)} nodes: {len(jobs)} cached; nothing to submit")
        return {job.name: "cached" for job in jobs}
    parent.hand_off()  # the closing job (this one's or an earlier invocation's) ends it
    for name, job_id in sub.submitted.items():
        log(f"submitted {job_id:>8}  {name}")
    for name, job_id in sub.adopted.items():
        log(f"in flight {job_id:>8}  {name} (submitted earlier: not resubmitted)")
    cached = sum(s.state in ("cached", "done") for s in sub.statuses)
    log(f"{len(jobs)} nodes: {cached} cached, {len(sub.submitted)} submitted, "
        f"{len(sub.adopted)} already in flight ({time.perf_counter() - start:.1f} s)")  # fmt: skip
    if sub.closer:
        log(f"MLflow run {sub.parent_run_id} is closed by job {sub.closer} when they end")
    ids = [*sub.submitted.values(), *sub.adopted.values()]
    if not cfg.executor.wait:
        by_name = {s.name: s.state for s in sub.statuses}
        return {j.name: "queued" if j.name in sub.submitted else by_name[j.name] for j in jobs}
    closers = [*([sub.closer] if sub.closer else []), *sub.earlier_closers]
    statuses = wait(cfg, jobs, ids, log, closers)
    for s in statuses:
        if s.state == "failed":
            log(f"FAILED  {s.name} (job {s.job_id}, {s.slurm_state}); log {s.log}:\n"
                f"{log_tail(s.log)}")  # fmt: skip
    log(summary(statuses))
    return {s.name: s.state if s.state in STATES else "failed" for s in statuses}


__all__ = [
    "NodeStatus", "_executor", "_folder", "_snapshot_setup", "book_path", "check_profile",
    "node_states", "print_status", "query_states", "read_book", "run_slurm",
    "stage_resources", "submit", "wait",
]  # fmt: skip
