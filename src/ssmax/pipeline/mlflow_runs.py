"""The MLflow runs of a pipeline invocation and of its nodes, opened, tagged and ended here: the
invocation's run (ParentRun), a node's run from its opening to its end (NodeRun: the engine
runs the node between), the runs of the nodes it found cached and its end
(close_pipeline_run), and the folder's runs whose process is gone (close_dead_runs).

A node's run is tagged once (job_tags: stage, node, fingerprint, variant and seed): the same
tags on the run a node opens, a training run's (its logger reads them from the stage's
context), its end, and the run that stands for it when it is cached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.state import write_pipeline_run
from ssmax.stages.spec import stage_spec
from ssmax.tracking.manifest import NODE_KEYS, SLURM_KEYS
from ssmax.tracking.runs import (
    child_run,
    close_dead,
    finish_run,
    log_artifacts,
    set_tags,
    start_pipeline_run,
)
from ssmax.tracking.spool import finish_later
from ssmax.tracking.store import folder_store, offline, tracking_uri, use_node_store
from ssmax.tracking.sync import merge_nodes
from ssmax.tracking.system_metrics import SystemMetrics, for_run


def job_tags(job: NodeJob) -> dict[str, str]:
    """The tags of a node's MLflow run."""
    tags = {"stage": job.stage, "node": job.name, "fingerprint": job.fingerprint}
    if job.variant is not None:
        tags |= {"variant": job.variant, "seed": str(job.seed)}
    return tags


@dataclass
class NodeRun:
    """A node's MLflow run, rank 0's (the other ranks of a DDP node track nothing): opened
    (open), watched while the stage runs (watch: system metrics), ended FAILED (failed) or
    FINISHED (finished). A node that does not train gets its child run here; a training
    node's run is its logger's (ssmax.lit.trainer), tagged from the stage's context."""

    job: NodeJob
    cfg: DictConfig
    rank0: bool
    tags: dict[str, str]
    run_id: str | None = None
    monitor: SystemMetrics | None = None

    @classmethod
    def open(cls, job: NodeJob, cfg: DictConfig, rank0: bool) -> NodeRun:
        """cfg (the node's) takes the pipeline's run as parent, and offline its own store in
        the node's folder; a training node that resumes reopens its earlier run under it."""
        directory = Path(job.dir)
        cfg.tracking.parent_run_id = job.parent_run_id
        if offline(cfg):  # a store of its own: no network, no sqlite file shared over network disk
            use_node_store(cfg, directory)
        tags = job_tags(job)
        # training makes its own MLflow run (rank 0's logger)
        tracked = rank0 and not job.trains and bool(cfg.tracking.enabled)
        run_id = child_run(cfg, job.name, job.parent_run_id, tags) if tracked else None
        if rank0 and job.trains and cfg.tracking.enabled and job.parent_run_id:
            adopt_resumed_run(cfg, directory, job.parent_run_id)
        return cls(job, cfg, rank0, tags, run_id)

    def watch(self) -> None:
        """This process's system metrics into the node's run while its stage runs (training:
        its logger's own)."""
        self.monitor = for_run(self.cfg, self.run_id) if self.run_id else None

    def _stop(self) -> None:
        if self.monitor:
            self.monitor.stop()
            self.monitor = None

    def failed(self, err: BaseException) -> None:
        """The stage raised: the run FAILED; offline, its store merged into the folder's before
        the node's folder may go (not for a requeue's exit nor an interrupt)."""
        self._stop()
        if self.run_id:
            finish_run(self.cfg, self.run_id, "FAILED")
        if self.rank0 and isinstance(err, Exception) and offline(self.cfg):
            merge_nodes(self.cfg.paths.output_dir, Path(self.job.dir))

    def finished(self, run_id: str | None) -> None:
        """The node's run (run_id: the one its outputs name, a training run's own) FINISHED; a
        training run on an absent server behind its pending metrics (ssmax.tracking.spool),
        not by a call that would wait minutes for it."""
        self._stop()
        if not (run_id and self.rank0):
            return
        later = self.job.trains and finish_later(
            Path(self.job.dir), tracking_uri(self.cfg), run_id, "FINISHED", self.tags
        )
        if not later:
            finish_run(self.cfg, run_id, "FINISHED", self.tags)


def adopt_resumed_run(cfg: DictConfig, directory: Path, parent_run_id: str) -> None:
    """A training node that resumes reopens the MLflow run an earlier pipeline run started
    (its id in the node's folder); it becomes a child of this pipeline's run, where the node
    now runs and will finish (the earlier one, killed or failed, no longer holds it)."""
    # lazy: ssmax.lit imports Lightning (~4 s on 2 cores); the pipeline process, its eval and
    # report workers and the SLURM client import this module without it (tests/test_layout.py)
    from ssmax.lit.trainer import RUN_ID_FILE

    id_file = directory / RUN_ID_FILE
    if id_file.exists():
        set_tags(cfg, id_file.read_text().strip(), {"mlflow.parentRunId": parent_run_id})


def close_dead_runs(cfg: DictConfig, log: Callable[[str], None]) -> None:
    """The folder's runs left RUNNING by processes that are gone (a crash, workers killed),
    closed (ssmax.tracking.liveness), said in one line."""
    if not cfg.tracking.enabled:
        return
    line = close_dead(folder_store(cfg), cfg.paths.output_dir)
    if line:
        log(line)


class ParentRun:
    """The MLflow run of one pipeline invocation, its nodes' runs its children. Started on first
    use (id()): an executor that only adopts jobs already in flight starts none. An executor
    whose own job closes it (SLURM's closing job) hands it off; else close() ends it. With
    tracking.enabled=false there is none (id() is None): nothing goes to MLflow."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg, self.handed_off = cfg, not cfg.tracking.enabled
        self._id: str | None = None
        self.experiment_id: str | None = None
        OPEN_RUNS.append(self)

    def id(self) -> str | None:
        if self._id is None and self.cfg.tracking.enabled:
            cfg = self.cfg
            name = f"pipeline-{cfg.preset.name}-{datetime.now():%Y%m%d-%H%M%S}"
            # start_pipeline_run adds the source tags (the git commit)
            tags = {"kind": "pipeline", "preset": str(cfg.preset.name),
                    "executor": str(cfg.executor.kind)}  # fmt: skip
            self._id, self.experiment_id = start_pipeline_run(cfg, name, tags)
            # the folder's run for the report: a server holds other folders' runs too
            write_pipeline_run(cfg.paths.output_dir, self._id, name, tracking_uri(cfg))
        return self._id

    def hand_off(self) -> None:
        self.handed_off = True

    def close(self, jobs: list[NodeJob], states: dict[str, str]) -> None:
        run_id = None if self.handed_off else self.id()
        if run_id is not None:
            close_pipeline_run(self.cfg, run_id, jobs, states)
        self.handed_off = True

    def abort(self, status: str) -> None:
        """The invocation ended on an exception: the run ends with status, not RUNNING."""
        if self._id is not None and not self.handed_off:
            finish_run(self.cfg, self._id, status)
        self.handed_off = True


OPEN_RUNS: list[ParentRun] = []  # this process's pipeline runs, for abort_open_runs


def abort_open_runs(status: str = "FAILED") -> None:
    """End the pipeline runs of this process still open (an executor raised)."""
    while OPEN_RUNS:
        OPEN_RUNS.pop().abort(status)


def made_by(record: dict[str, Any]) -> dict[str, str]:
    """The tags of a cached node's run that say what made it, from its done record (the
    commit, packages, machine and SLURM job of the run that did), not from this process; none
    for a record from before they were kept."""
    tags = {k: str(record[k]) for k in (*NODE_KEYS, *SLURM_KEYS) if record.get(k)}
    if record.get("git_commit"):
        commit = str(record["git_commit"])
        tags |= {"git_commit": commit, "mlflow.source.git.commit": commit}
    return tags


def close_pipeline_run(
    cfg: DictConfig, parent_run_id: str, jobs: list[NodeJob], states: dict[str, str]
) -> None:
    """Cached nodes appear as child runs linked to the run that made them; the folders a node's
    stage declares (StageSpec.artifacts) become the run's artifacts; it ends FINISHED or FAILED."""
    if offline(cfg):  # the nodes' own stores into the folder's, before its cached runs
        merge_nodes(cfg.paths.output_dir)
    for job in jobs:
        if states.get(job.name) != "cached":
            continue
        record = job.done
        tags = job_tags(job) | {"cached": "true", "source_run_id": str(record.get("run_id"))}
        run_id = child_run(cfg, job.name, parent_run_id, tags | made_by(record),
                           log_params=False, here=False)  # fmt: skip
        finish_run(cfg, run_id, "FINISHED")
    for job in (j for j in jobs if states.get(j.name) in ("cached", "done")):
        for folder in stage_spec(job.module).artifacts:
            log_artifacts(cfg, parent_run_id, Path(job.dir) / folder)
    failed = any(s in ("failed", "blocked") for s in states.values())
    finish_run(cfg, parent_run_id, "FAILED" if failed else "FINISHED")
