"""SLURM submission: one sbatch job per node (submitit) with `afterok` on its upstream jobs,
a closing job that ends the MLflow parent run, and waiting for them."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import submitit
from omegaconf import DictConfig, OmegaConf

from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.mlflow_runs import close_pipeline_run
from ssmax.pipeline.progress import Progress
from ssmax.pipeline.run import execute_node
from ssmax.pipeline.slurm.cluster_profile import closer_resources, stage_resources
from ssmax.pipeline.slurm.jobs import (
    ACTIVE,
    NodeStatus,
    _client,
    _folder,
    _key,
    _locked_book,
    node_states,
    query_states,
    read_book,
)  # fmt: skip
from ssmax.pipeline.snapshot import setup_lines, snapshot
from ssmax.tracking.runs import hand_run_to_job

Log = Callable[[str], None]


def _executor(cfg: DictConfig, res: dict[str, Any], name: str, deps: list[str], after: str):
    # submitit's own count of time-outs stays above ours: ssmax.pipeline.requeue decides.
    max_timeouts = int(cfg.executor.max_requeues) + 1
    executor = submitit.AutoExecutor(
        folder=_folder(cfg), cluster="slurm", slurm_max_num_timeout=max_timeouts
    )
    extra = dict(res["additional_parameters"] or {})
    if deps:  # kill_on_invalid_dep: cancel a dependant when its upstream fails (not pend forever)
        extra |= {"dependency": f"{after}:" + ":".join(deps), "kill_on_invalid_dep": "yes"}
    params = {
        "name": f"ssmax:{name}", "timeout_min": int(res["timeout_min"]), "nodes": res["nodes"],
        "tasks_per_node": res["tasks_per_node"], "cpus_per_task": res["cpus_per_task"],
        "mem_gb": res["mem_gb"], "slurm_partition": res["partition"],
        "slurm_account": res["account"], "slurm_qos": res["qos"],
        "slurm_constraint": res["constraint"], "slurm_additional_parameters": extra,
        "slurm_setup": list(res["setup"] or []),
        "gpus_per_node": res["gpus_per_node"] or None,  # no --gpus-per-node=0 on GPU-less sites
        # USR2 this long before the time limit: time to end the step and write a checkpoint.
        "slurm_signal_delay_s": res["signal_delay_s"],
    }  # fmt: skip
    executor.update_parameters(**{k: v for k, v in params.items() if v is not None})
    return executor


@dataclass
class Submission:
    statuses: list[NodeStatus]  # before submitting
    submitted: dict[str, str]  # node name -> new job id
    adopted: dict[str, str]  # node name -> job id already queued/running
    parent_run_id: str | None = None
    closer: str | None = None  # the job that closes the MLflow parent run
    earlier_closers: list[str] = field(default_factory=list)  # of the adopted jobs' runs


def submit(
    cfg: DictConfig, jobs: list[NodeJob], parent: Callable[[], str | None], closer: bool = True
) -> Submission:
    """Submit every node that is neither done nor queued/running; `parent()` starts the MLflow
    parent run (only called when there is something to submit). With closer, one more job
    closes that run once every node's job has ended."""
    with _locked_book(cfg) as book:
        statuses = node_states(cfg, jobs, book)
        by_name = {s.name: s for s in statuses}
        adopted = {s.name: s.job_id for s in statuses if s.active and s.job_id}
        todo = [j for j in jobs if by_name[j.name].state not in ("cached", "done", "queued",
                                                                 "running")]  # fmt: skip
        sub = Submission(statuses, {}, adopted, earlier_closers=_closers(book, jobs, adopted))
        if not todo:
            return sub
        # A dependant left pending on a failed input (a site without kill_on_invalid_dep)
        # would never run: cancel it before its node is submitted again.
        stuck = [s.job_id for s in statuses if s.state == "blocked" and s.slurm_state in ACTIVE]
        if stuck:
            _client("scancel", *[i for i in stuck if i])
        sub.parent_run_id = parent()
        frozen = _snapshot_setup(cfg)
        ids = dict(adopted)
        for job in todo:  # inputs come first: their ids are known when a dependant is submitted
            res = stage_resources(cfg, job.stage)
            res["setup"] = [*frozen, *(res["setup"] or [])]
            deps = [ids[i] for i in job.input_dirs if i in ids]
            job.parent_run_id = sub.parent_run_id
            job.threads = int(res["cpus_per_task"])  # torch threads = the CPUs SLURM gave
            executor = _executor(cfg, res, job.name, deps, "afterok")
            if job.trains:  # checkpoint and requeue on USR2 (time-out, preempt)
                # lazy: requeue imports Lightning (~4 s on 2 cores): only here, not in every
                # pipeline process that imports the SLURM executor
                from ssmax.pipeline.requeue import TrainingNode

                _set_num_nodes(job, int(res["nodes"]))
                node = TrainingNode(job, int(cfg.executor.max_requeues))
                sjob = executor.submit(node)
            else:
                sjob = executor.submit(_execute, job)
            ids[job.name] = sub.submitted[job.name] = str(sjob.job_id)
            book["nodes"][_key(job)] = {
                "node": job.name, "fingerprint": job.fingerprint, "job_id": str(sjob.job_id),
                "parent_run_id": sub.parent_run_id, "submitted": datetime.now().isoformat(),
            }  # fmt: skip
        if not closer or sub.parent_run_id is None:  # None: tracking.enabled=false
            return sub
        # afterany: ends the MLflow run however the nodes end (cancelled ones included).
        res = closer_resources(cfg)
        res["setup"] = [*frozen, *(res["setup"] or [])]
        closing = _executor(cfg, res, "close-run", list(ids.values()), "afterany").submit(
            close_run, OmegaConf.to_yaml(cfg), sub.parent_run_id, jobs, sorted(sub.submitted)
        )
        sub.closer = str(closing.job_id)
        hand_run_to_job(cfg, sub.parent_run_id, sub.closer)  # never closed as its submitter's
        book["runs"][sub.parent_run_id] = {"closer_job": sub.closer,
                                           "submitted": datetime.now().isoformat()}  # fmt: skip
    return sub


def _closers(book: dict[str, Any], jobs: list[NodeJob], adopted: dict[str, str]) -> list[str]:
    """The closing jobs of the earlier invocations whose node jobs are adopted: waiting for
    those nodes means waiting for their MLflow runs to be closed too."""
    runs = {book["nodes"][_key(j)].get("parent_run_id") for j in jobs if j.name in adopted}
    return sorted({book["runs"][r]["closer_job"] for r in runs if r in book["runs"]})


def _snapshot_setup(cfg: DictConfig) -> list[str]:
    """With executor.snapshot, the jobs import a copy of the code as it is now (see
    ssmax.pipeline.snapshot), not the checkout as it will be when they start."""
    if not cfg.executor.snapshot:
        return []

    return setup_lines(snapshot(cfg.paths.output_dir))


def _set_num_nodes(job: NodeJob, nodes: int) -> None:
    """Lightning's num_nodes from the profile (one process group over all the job's nodes).
    Not part of the fingerprint: the global batch, hence the result, does not depend on it."""
    cfg = OmegaConf.create(job.cfg_yaml)
    cfg.trainer.num_nodes = nodes
    job.cfg_yaml = OmegaConf.to_yaml(cfg)


def _execute(job: NodeJob) -> dict[str, Any]:
    return execute_node(job)


def close_run(cfg_yaml: str, parent_run_id: str, jobs: list[NodeJob], submitted: list[str]) -> str:
    """The closing job: every node of this invocation has ended. Nodes it ran count as done,
    nodes finished by earlier runs as cached (linked child runs); the run ends FINISHED only
    when every node has its done-marker."""
    cfg = OmegaConf.create(cfg_yaml)
    states: dict[str, str] = {}
    for job in jobs:
        if job.done is not None:
            states[job.name] = "done" if job.name in submitted else "cached"
        elif any(states.get(i) in ("failed", "blocked") for i in job.input_dirs):
            states[job.name] = "blocked"
        else:
            states[job.name] = "failed"
    close_pipeline_run(cfg, parent_run_id, jobs, states)
    return "FAILED" if {"failed", "blocked"} & set(states.values()) else "FINISHED"


def wait(
    cfg: DictConfig, jobs: list[NodeJob], ids: list[str], log: Log, closers: Sequence[str] = ()
) -> list[NodeStatus]:
    """Poll SLURM until no node job in ids (nor a closing job: the MLflow runs are closed when
    this returns) is queued or running; log each node as it ends, with how far the run is."""
    poll = float(cfg.executor.poll_s)
    reported: set[str] = set()
    statuses = node_states(cfg, jobs, read_book(cfg))
    waited = {s.name for s in statuses if s.job_id in ids}
    progress = Progress.of([job for job in jobs if job.name in waited])  # timed from now
    while True:
        for s in statuses:
            if s.job_id in ids and not s.active and s.name not in reported:
                reported.add(s.name)
                slurm = s.slurm_state or "gone"  # a done node's job may still be closing
                slurm = "ending" if s.state == "done" and slurm in ACTIVE else slurm
                log(f"{s.state:<8} {s.name} (job {s.job_id}, {slurm}; "
                    f"{progress.after({s.name: s.state})})")  # fmt: skip
        closing = any(st in ACTIVE for st, _ in query_states(list(closers)).values())
        if not closing and not any(s.active and s.job_id in ids for s in statuses):
            return statuses
        time.sleep(poll)
        statuses = node_states(cfg, jobs, read_book(cfg))
