"""Plan the DAG (configs, fingerprints, what is cached) and execute what is not.

``plan`` is pure: it composes each node's config and fingerprint and looks for done-markers.
``execute_node`` runs one node from a picklable NodeJob: the same call in process, in a local
subprocess or in a cluster job. ``ssmax.pipeline.executors.run_pipeline`` runs the planned
nodes with an executor under one MLflow run (ParentRun, here).
"""

from __future__ import annotations

import importlib
import shutil
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError, absolute_paths
from ssmax.config.remembered import composed
from ssmax.files.atomic import remove_temporaries
from ssmax.host.cpu_isa import check_pinned, on_cpu, pin_environment
from ssmax.host.ranks import global_rank
from ssmax.pipeline.dag import Node, build_dag, only_targets
from ssmax.pipeline.declaration import Declaration, load
from ssmax.pipeline.fingerprint import fingerprint
from ssmax.pipeline.state import (
    module_of,
    node_dir,
    read_done,
    read_record,
    write_done,
    write_pipeline_run,
)
from ssmax.preflight.input_files import check_inputs
from ssmax.preflight.memory import check_eval_memory
from ssmax.preflight.overrides import keys_named_first
from ssmax.preflight.settings import validate
from ssmax.stages.context import StageContext
from ssmax.stages.spec import COMMON_USES, stage_spec
from ssmax.tracking import (
    child_run,
    finish_run,
    log_artifacts,
    offline,
    set_tags,
    start_pipeline_run,
    tracking_uri,
    use_node_store,
)
from ssmax.tracking.manifest import NODE_KEYS, SLURM_KEYS, git_commit, node_tags
from ssmax.tracking.spool import finish_later
from ssmax.tracking.sync import merge_nodes
from ssmax.tracking.system_metrics import for_run


@dataclass
class NodeJob:
    """Everything a worker needs to run one node (picklable, paths absolute)."""

    name: str
    stage: str
    module: str  # in ssmax.stages
    trains: bool  # the stage makes its own MLflow run and checkpoints
    inline: bool  # no compute: the local executor runs it in its own process
    variant: str | None
    seed: int | None
    cfg_yaml: str
    fingerprint: str
    dir: str
    input_dirs: dict[str, str]
    parent_run_id: str | None = None
    threads: int | None = None  # torch threads for this node (parallel local workers share cores)
    flops: float | None = None  # what plan counts for it (set by the executor; kept in done.json)
    remaining: float = 0.0  # its FLOPs and the heaviest chain waiting on it (the local order)

    @property
    def done(self) -> dict[str, Any] | None:
        return read_done(Path(self.dir), self.fingerprint)


def only_keys(cfg: DictConfig, keys: tuple[str, ...]) -> DictConfig:
    """A copy of cfg holding only the given dotted keys ("data:lm" keeps data); reading any
    other key of it raises."""
    out = OmegaConf.create({})
    for key in keys:
        key = key.split(":")[0]
        value = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if value is not None or OmegaConf.select(cfg, key, default="?") is None:
            OmegaConf.update(out, key, value, force_add=True)
    OmegaConf.set_struct(out, True)
    return out


def _finish_later(cfg: DictConfig, directory: Path, run_id: str, job: NodeJob) -> bool:
    """A training run whose tracking server was away when it ended is finished behind its
    pending metrics (ssmax.tracking.spool), not by a call that would wait minutes for it."""
    return finish_later(directory, tracking_uri(cfg), run_id, "FINISHED", _tags(job))


def compose_pipeline(overrides: list[str]) -> DictConfig:
    """The pipeline config, its declaration's variants and seeds filled in, validated
    (ConfigError: one line; a key the config lacks named with its nearest neighbours)."""
    with keys_named_first(overrides, "pipeline"):
        base = composed(*overrides, config_name="pipeline")
        declared(base)
        validate(base)
    return base


def compose_node(overrides: list[str], base: DictConfig, variant: str, seed: int) -> DictConfig:
    """One node's config, validated: the pipeline's (base, composed from overrides) for a
    variant and seed, with that variant's own overrides (pipeline.overrides.<variant>)."""
    extra = list(base.pipeline.overrides.get(variant) or [])
    with keys_named_first(extra, "pipeline", prefix=f"pipeline.overrides.{variant}: "):
        cfg = composed(*overrides, f"variant={variant}", f"seed={seed}", *extra,
                       config_name="pipeline")  # fmt: skip
        validate(cfg)
    return cfg


def declared(cfg: DictConfig) -> Declaration:
    """The declaration pipeline.file names; it fills pipeline.variants and pipeline.seeds where
    the config leaves them null."""
    decl = load(str(cfg.pipeline.file))
    for key in ("variants", "seeds"):
        if cfg.pipeline[key] is None:
            cfg.pipeline[key] = list(getattr(decl, key))
    return decl


def checked_targets(targets: list[str], decl: Declaration) -> list[str]:
    """pipeline.targets, each a stage of the declaration (ConfigError: one line)."""
    unknown = [t for t in targets if t not in decl.stages]
    if unknown:
        raise ConfigError(
            f"pipeline.targets: {unknown[0]!r} is not a stage of pipeline.file={decl.name}; "
            f"allowed: {', '.join(decl.stages)}"
        )
    return targets


def _reads(cfg: DictConfig) -> object:
    """What of a config names files to read (preflight.input_files.check_inputs checks them)."""
    return OmegaConf.to_container(cfg.data, resolve=True), cfg.init_from, cfg.paths.output_dir


def plan(overrides: list[str], base: DictConfig | None = None) -> tuple[DictConfig, list[NodeJob]]:
    """The pipeline config (base: compose_pipeline(overrides), if already composed) and every
    node as a job, inputs first. Every setting and input file is checked first (ConfigError:
    one line; a key the config lacks named with its nearest neighbours)."""
    base = compose_pipeline(overrides) if base is None else base
    decl = declared(base)  # the declaration itself (its variants and seeds are filled in)
    if on_cpu(base.trainer.accelerator):  # before this process computes; workers inherit it
        pin_environment(base.trainer.cpu_isa)
    absolute_paths(base)
    check_inputs(base)
    check_eval_memory(base)  # an eval context no memory here holds
    dag = build_dag(decl, list(base.pipeline.variants), list(base.pipeline.seeds))
    if base.pipeline.targets:
        dag = only_targets(dag, checked_targets(list(base.pipeline.targets), decl))
    configs: dict[tuple[str | None, int | None], tuple[DictConfig, str]] = {}
    jobs: dict[str, NodeJob] = {}
    for node in dag.values():
        key = (node.variant, node.seed)
        if key not in configs:  # one per variant and seed, its YAML written once
            cfg = base if node.variant is None else compose_node(overrides, base, *key)
            absolute_paths(cfg)
            if _reads(cfg) != _reads(base):  # a variant's overrides name other files
                check_inputs(cfg)
            if cfg.eval != base.eval or cfg.model != base.model:  # ... or other evals
                check_eval_memory(cfg)
            configs[key] = cfg, OmegaConf.to_yaml(cfg, resolve=True)
        jobs[node.name] = _job(node, decl.stages[node.stage], *configs[key], jobs)
    return base, list(jobs.values())


def _job(
    node: Node, module: str, cfg: DictConfig, cfg_yaml: str, upstream: dict[str, NodeJob]
) -> NodeJob:
    spec = stage_spec(module)
    fp = fingerprint(node.stage, module, spec, cfg, [upstream[i].fingerprint for i in node.inputs])
    directory = node_dir(cfg.paths.output_dir, node.name, fp)
    return NodeJob(
        name=node.name, stage=node.stage, module=module, trains=spec.trains,
        inline=spec.inline, variant=node.variant, seed=node.seed, cfg_yaml=cfg_yaml,
        fingerprint=fp, dir=str(directory), input_dirs={i: upstream[i].dir for i in node.inputs},
    )  # fmt: skip


def execute_node(job: NodeJob, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one node and write its done-marker; returns the done record (extra: more of it,
    a bundled seed's `bundle`).

    When several processes run the node (DDP: one SLURM task per device), each runs the stage
    (training needs them all) but only global rank 0 writes: the node folder, the MLflow run,
    the done-marker. The others return the record without writing it."""
    cfg = OmegaConf.create(job.cfg_yaml)
    pin_process(cfg, job.threads)
    rank0 = global_rank() == 0
    ctx = open_node(job, cfg, rank0)
    directory, run_id = ctx.out_dir, ctx.run_id
    start = time.perf_counter()
    module = importlib.import_module(f"ssmax.stages.{job.module}")
    monitor = for_run(cfg, run_id) if run_id else None  # training: its logger's own
    try:
        outputs = module.run(ctx)
    except BaseException as err:
        if monitor:
            monitor.stop()
        if run_id:
            finish_run(cfg, run_id, "FAILED")
        if rank0 and isinstance(err, Exception):  # not a requeue's exit nor an interrupt
            if offline(cfg):  # its failed run, before its folder may go
                merge_nodes(cfg.paths.output_dir, directory)
            discard_unresumable(directory)
        raise
    if monitor:
        monitor.stop()
    return close_node(job, cfg, outputs, outputs.get("run_id", run_id),
                      time.perf_counter() - start, rank0, extra)  # fmt: skip


def pin_process(cfg: DictConfig, threads: int | None) -> None:
    """This process's kernels pinned (trainer.cpu_isa on the CPU: ssmax.host.cpu_isa) before
    a node's first computation, and its torch threads (one where pinned)."""
    isa = cfg.trainer.cpu_isa if on_cpu(cfg.trainer.accelerator) else None
    if pin_environment(isa):
        check_pinned(isa)
    if threads or isa:
        torch.set_num_threads(1 if isa else threads)


def open_node(job: NodeJob, cfg: DictConfig, rank0: bool) -> StageContext:
    """The node's folder (rank 0: made, config.yaml written), its MLflow run (a child of the
    pipeline's; training's comes from its logger) and its inputs' records: what its stage
    runs with. cfg (the node's) takes the pipeline's run as parent, and offline its own store."""
    directory = Path(job.dir)
    if rank0:
        directory.mkdir(parents=True, exist_ok=True)
        # what an attempt killed mid-write left (the node's folder is this process's now)
        remove_temporaries(directory)
        (directory / "config.yaml").write_text(job.cfg_yaml)
    cfg.tracking.parent_run_id = job.parent_run_id
    if offline(cfg):  # a store of its own: no network, no sqlite file shared over network disk
        use_node_store(cfg, directory)
    inputs, fingerprints, modules = {}, {}, {}
    for name, input_dir in job.input_dirs.items():
        record = read_record(Path(input_dir))
        if record is None:
            raise RuntimeError(f"{job.name}: input {name} has no result in {input_dir}")
        inputs[name] = record["outputs"]
        fingerprints[name] = str(record["fingerprint"])
        modules[name] = module_of(record)
    # training makes its own MLflow run (rank 0's logger)
    tracked = rank0 and not job.trains and bool(cfg.tracking.enabled)
    run_id = child_run(cfg, job.name, job.parent_run_id, _tags(job)) if tracked else None
    if rank0 and job.trains and cfg.tracking.enabled and job.parent_run_id:
        adopt_resumed_run(cfg, directory, job.parent_run_id)
    stage_cfg = cfg
    if cfg.pipeline.strict_reads:  # the stage sees only what it declares
        spec = stage_spec(job.module)
        stage_cfg = only_keys(cfg, (*spec.reads, *spec.uses, *COMMON_USES))
    return StageContext(job.name, job.stage, stage_cfg, directory, inputs, run_id, _tags(job),
                        fingerprints, {n: Path(d) for n, d in job.input_dirs.items()},
                        modules)  # fmt: skip


def close_node(job: NodeJob, cfg: DictConfig, outputs: dict[str, Any], run_id: str | None,
               wall_s: float, rank0: bool = True, extra: dict[str, Any] | None = None,
               ) -> dict[str, Any]:  # fmt: skip
    """A node's end: its MLflow run FINISHED (a training run on an absent server: behind its
    pending metrics), then its done record (rank 0 writes it, last); returns the record.
    extra: more of the record (a bundled seed's `bundle`)."""
    directory = Path(job.dir)
    if run_id and rank0 and not (job.trains and _finish_later(cfg, directory, run_id, job)):
        finish_run(cfg, run_id, "FINISHED", _tags(job))
    record = {
        "node": job.name, "module": job.module, "fingerprint": job.fingerprint, "outputs": outputs,
        "run_id": run_id, "wall_s": round(wall_s, 3),
        "flops": job.flops,  # with wall_s: what later seeds cost here (plan)
        # what made it: its code, packages (plan names nodes of another set), machine
        "git_commit": git_commit(), **node_tags(), **(extra or {}),
    }  # fmt: skip
    if rank0:
        write_done(directory, record)
    return record


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


def discard_unresumable(directory: Path) -> None:
    """A failed node's folder goes unless it holds a checkpoint to resume from: `plan` then
    shows it to-run, not partial, and the next run starts it afresh."""
    if not any(directory.rglob("*.ckpt")):
        shutil.rmtree(directory, ignore_errors=True)


def _tags(job: NodeJob) -> dict[str, str]:
    tags = {"stage": job.stage, "node": job.name, "fingerprint": job.fingerprint}
    if job.variant is not None:
        tags |= {"variant": job.variant, "seed": str(job.seed)}
    return tags


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
        tags = _tags(job) | {"cached": "true", "source_run_id": str(record.get("run_id"))}
        run_id = child_run(cfg, job.name, parent_run_id, tags | made_by(record),
                           log_params=False, here=False)  # fmt: skip
        finish_run(cfg, run_id, "FINISHED")
    for job in (j for j in jobs if states.get(j.name) in ("cached", "done")):
        for folder in stage_spec(job.module).artifacts:
            log_artifacts(cfg, parent_run_id, Path(job.dir) / folder)
    failed = any(s in ("failed", "blocked") for s in states.values())
    finish_run(cfg, parent_run_id, "FAILED" if failed else "FINISHED")
