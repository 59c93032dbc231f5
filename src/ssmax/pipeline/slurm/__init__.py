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
from datetime import datetime

from omegaconf import DictConfig

from ssmax.pipeline.run import NodeJob, close_pipeline_run
from ssmax.pipeline.slurm.profile import check_profile, stage_resources
from ssmax.pipeline.slurm.queue import (
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


def run_cli(cfg: DictConfig, jobs: list[NodeJob], overrides: list[str], log: Log = print) -> int:
    """`python -m ssmax.pipeline run executor=slurm ...`: submit and return (or wait)."""
    from ssmax.tracking import git_commit, start_pipeline_run

    start = time.perf_counter()
    check_profile(cfg, jobs)

    def parent() -> str:
        name = f"pipeline-{cfg.preset.name}-{datetime.now():%Y%m%d-%H%M%S}"
        tags = {"kind": "pipeline", "preset": str(cfg.preset.name), "git_commit": git_commit(),
                "executor": "slurm"}  # fmt: skip
        return start_pipeline_run(cfg, name, tags)

    sub = submit(cfg, jobs, parent)
    watch = "python -m ssmax.pipeline status " + " ".join(overrides)
    if not sub.submitted and not sub.adopted:  # everything cached: like the other executors
        run_id = parent()
        close_pipeline_run(cfg, run_id, jobs, {j.name: "cached" for j in jobs})
        log(f"{len(jobs)} nodes: {len(jobs)} cached; nothing to submit")
        return 0
    for name, job_id in sub.submitted.items():
        log(f"submitted {job_id:>8}  {name}")
    for name, job_id in sub.adopted.items():
        log(f"in flight {job_id:>8}  {name} (submitted earlier: not resubmitted)")
    cached = sum(s.state in ("cached", "done") for s in sub.statuses)
    log(f"{len(jobs)} nodes: {cached} cached, {len(sub.submitted)} submitted, "
        f"{len(sub.adopted)} already in flight ({time.perf_counter() - start:.1f} s)")  # fmt: skip
    if sub.closer:
        log(f"MLflow run {sub.parent_run_id} is closed by job {sub.closer} when they end")
    if not cfg.executor.wait:
        log(f"watch: {watch}")
        return 0
    ids = [*sub.submitted.values(), *sub.adopted.values()]
    statuses = wait(cfg, jobs, ids, log, sub.closer)
    bad = [s for s in statuses if s.state in ("failed", "blocked")]
    for s in bad:
        if s.state == "failed":
            log(f"FAILED  {s.name} (job {s.job_id}, {s.slurm_state}); log {s.log}:\n"
                f"{log_tail(s.log)}")  # fmt: skip
    log(summary(statuses))
    log(f"wall time: {time.perf_counter() - start:.1f} s")
    return 1 if bad else 0


def run_slurm(jobs: list[NodeJob], cfg: DictConfig, log: Log) -> dict[str, str]:
    """The executor interface of ssmax.pipeline.executors: submit, wait, {name: state}; the
    caller owns the MLflow parent run (set on the jobs) and closes it."""
    check_profile(cfg, jobs)
    parent_run_id = jobs[0].parent_run_id if jobs else None
    sub = submit(cfg, jobs, lambda: parent_run_id, closer=False)
    ids = [*sub.submitted.values(), *sub.adopted.values()]
    statuses = wait(cfg, jobs, ids, log) if ids else sub.statuses
    mapping = {"done": "done", "cached": "cached", "failed": "failed", "blocked": "blocked"}
    return {s.name: mapping.get(s.state, "failed") for s in statuses}


__all__ = [
    "NodeStatus", "_executor", "_folder", "_snapshot_setup", "book_path", "check_profile",
    "node_states", "print_status", "query_states", "read_book", "run_cli", "run_slurm",
    "stage_resources", "submit", "wait",
]  # fmt: skip
