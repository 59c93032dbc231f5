"""Plan the DAG (configs, fingerprints, what is cached) and execute what is not.

``plan`` is pure: it composes each node's config and fingerprint and looks for done-markers.
``execute_node`` runs one node from a picklable NodeJob: the same call in process, in a local
subprocess or in a cluster job, its MLflow run opened and ended by
ssmax.pipeline.mlflow_runs.NodeRun. ``ssmax.pipeline.executors.run_pipeline`` runs the planned
nodes with an executor under one MLflow run (ssmax.pipeline.mlflow_runs.ParentRun).
"""

from __future__ import annotations

import copy
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError, absolute_paths
from ssmax.config.remembered import composed
from ssmax.files.atomic import remove_temporaries
from ssmax.host.cpu_isa import check_pinned, on_cpu, pin_environment
from ssmax.host.logs import quiet_lightning_tips
from ssmax.host.ranks import global_rank
from ssmax.pipeline.dag import Node, build_dag, only_targets
from ssmax.pipeline.declaration import Declaration, load
from ssmax.pipeline.fingerprint import fingerprint
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.mlflow_runs import NodeRun
from ssmax.pipeline.state import (
    module_of,
    node_dir,
    read_record,
    write_done,
)
from ssmax.preflight.input_files import check_inputs
from ssmax.preflight.memory import check_eval_memory
from ssmax.preflight.overrides import keys_named_first
from ssmax.preflight.settings import validate
from ssmax.stages.context import StageContext
from ssmax.stages.outputs import read_outputs, to_record
from ssmax.stages.spec import COMMON_USES, stage_module, stage_spec
from ssmax.tracking.manifest import git_commit, node_tags


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


def compose_pipeline(overrides: list[str]) -> DictConfig:
    """The pipeline config, its declaration's variants and seeds filled in, validated
    (ConfigError: one line; a key the config lacks named with its nearest neighbours)."""
    with keys_named_first(overrides, "pipeline"):
        base = composed(*overrides, config_name="pipeline")
        declared(base)
        validate(base)
    return base


def compose_node(
    overrides: list[str],
    base: DictConfig,
    variant: str,
    seed: int,
    made: dict[str, DictConfig] | None = None,
) -> DictConfig:
    """One node's config, validated: the pipeline's (base, composed from overrides) for a
    variant and seed, with that variant's own overrides (pipeline.overrides.<variant>).
    made: the variant's config for another seed, where one was composed (filled here): a copy
    of it with this seed is the config Hydra composes (tests/test_plan_configs.py), valid as
    that one is (no rule between settings reads the seed; the seed itself is one of
    pipeline.seeds, checked with the pipeline's config). A 48-seed plan of 7 variants composed
    336 configs; with the copies, 7: 131 -> 58 s (2026-11-30)."""
    extra = list(base.pipeline.overrides.get(variant) or [])
    if made is not None and variant in made and not any(sets_seed(o) for o in extra):
        cfg = copy.deepcopy(made[variant])
        cfg.seed = seed
        return cfg
    with keys_named_first(extra, "pipeline", prefix=f"pipeline.overrides.{variant}: "):
        cfg = composed(*overrides, f"variant={variant}", f"seed={seed}", *extra,
                       config_name="pipeline")  # fmt: skip
        validate(cfg)
    if made is not None:
        made[variant] = copy.deepcopy(cfg)
    return cfg


def sets_seed(override: str) -> bool:
    """Whether a Hydra override names the seed (a variant's own then wins over the node's)."""
    return override.lstrip("+~").split("=", 1)[0].strip() == "seed"


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
    made: dict[str, DictConfig] = {}  # each variant's first config, for its other seeds
    jobs: dict[str, NodeJob] = {}
    for node in dag.values():
        key = (node.variant, node.seed)
        if key not in configs:  # one per variant and seed, its YAML written once
            cfg = base if node.variant is None else compose_node(overrides, base, *key, made)
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
    quiet_lightning_tips()
    rank0 = global_rank() == 0
    ctx, tracked = open_node(job, cfg, rank0)
    start = time.perf_counter()
    module = stage_module(job.module)
    tracked.watch()
    try:
        outputs = module.run(ctx)
    except BaseException as err:
        tracked.failed(err)
        if rank0 and isinstance(err, Exception):  # not a requeue's exit nor an interrupt
            discard_unresumable(ctx.out_dir)
        raise
    # a training stage's outputs name the run that trained it; the others', the node's run
    return close_node(job, tracked, outputs, getattr(outputs, "run_id", ctx.run_id),
                      time.perf_counter() - start, extra)  # fmt: skip


def pin_process(cfg: DictConfig, threads: int | None) -> None:
    """This process's kernels pinned (trainer.cpu_isa on the CPU: ssmax.host.cpu_isa) before
    a node's first computation, and its torch threads (one where pinned)."""
    isa = cfg.trainer.cpu_isa if on_cpu(cfg.trainer.accelerator) else None
    if pin_environment(isa):
        check_pinned(isa)
    if threads or isa:
        torch.set_num_threads(1 if isa else threads)


def open_node(job: NodeJob, cfg: DictConfig, rank0: bool) -> tuple[StageContext, NodeRun]:
    """The node's folder (rank 0: made, config.yaml written), its inputs' records and its
    MLflow run (NodeRun.open: a child of the pipeline's; training's comes from its logger):
    what its stage runs with, and its run to end (close_node)."""
    directory = Path(job.dir)
    if rank0:
        directory.mkdir(parents=True, exist_ok=True)
        # what an attempt killed mid-write left (the node's folder is this process's now)
        remove_temporaries(directory)
        (directory / "config.yaml").write_text(job.cfg_yaml)
    inputs, fingerprints, modules = {}, {}, {}
    for name, input_dir in job.input_dirs.items():
        record = read_record(Path(input_dir))
        if record is None:
            raise RuntimeError(f"{job.name}: input {name} has no result in {input_dir}")
        modules[name] = module_of(record)
        if modules[name] is None:
            raise RuntimeError(f"{job.name}: input {name}'s record names no stage module")
        inputs[name] = read_outputs(str(modules[name]), record)  # its stage's declared type
        fingerprints[name] = str(record["fingerprint"])
    tracked = NodeRun.open(job, cfg, rank0)  # cfg: the pipeline's run as parent, its store
    stage_cfg = cfg
    if cfg.pipeline.strict_reads:  # the stage sees only what it declares
        spec = stage_spec(job.module)
        stage_cfg = only_keys(cfg, (*spec.reads, *spec.uses, *COMMON_USES))
    ctx = StageContext(job.name, job.stage, stage_cfg, directory, inputs, tracked.run_id,
                       tracked.tags, fingerprints, {n: Path(d) for n, d in job.input_dirs.items()},
                       modules)  # fmt: skip
    return ctx, tracked


def close_node(job: NodeJob, tracked: NodeRun, outputs: Any, run_id: str | None,
               wall_s: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """A node's end: its MLflow run FINISHED (NodeRun.finished; run_id: the one its outputs
    name), then its done record (rank 0 writes it, last); returns the record.
    outputs: an instance of its stage's SPEC.outputs, written as a dict (to_record).
    extra: more of the record (a bundled seed's `bundle`)."""
    declared = stage_spec(job.module).outputs
    if declared is None or not isinstance(outputs, declared):
        err = TypeError(f"{job.name}: ssmax.stages.{job.module}.run returned "
                        f"{type(outputs).__name__}, not its SPEC.outputs ({declared})")  # fmt: skip
        tracked.failed(err)
        raise err
    tracked.finished(run_id)
    record = {
        "node": job.name, "module": job.module, "fingerprint": job.fingerprint,
        "outputs": to_record(outputs),
        "run_id": run_id, "wall_s": round(wall_s, 3),
        "flops": job.flops,  # with wall_s: what later seeds cost here (plan)
        # what made it: its code, packages (plan names nodes of another set), machine
        "git_commit": git_commit(), **node_tags(), **(extra or {}),
    }  # fmt: skip
    if tracked.rank0:
        write_done(Path(job.dir), record)
    return record


def discard_unresumable(directory: Path) -> None:
    """A failed node's folder goes unless it holds a checkpoint to resume from: `plan` then
    shows it to-run, not partial, and the next run starts it afresh."""
    if not any(directory.rglob("*.ckpt")):
        shutil.rmtree(directory, ignore_errors=True)
