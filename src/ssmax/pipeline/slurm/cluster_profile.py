"""SLURM profile: each stage's resources (executor.* with executor.stages.<stage> on top) and
the checks that name a bad profile in one line before anything is submitted."""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError
from ssmax.pipeline.declaration import load
from ssmax.stages.spec import stage_spec

if TYPE_CHECKING:
    from ssmax.pipeline.job import NodeJob

RESOURCE_KEYS = (
    "partition", "account", "qos", "timeout_min", "nodes", "gpus_per_node", "tasks_per_node",
    "cpus_per_task", "mem_gb", "constraint", "additional_parameters", "setup", "signal_delay_s",
)  # fmt: skip


def stage_resources(cfg: DictConfig, stage: str) -> dict[str, Any]:
    """The profile's resources with the stage's own settings (executor.stages.<stage>) on top."""
    ex = OmegaConf.to_container(cfg.executor, resolve=True)
    res = {key: ex[key] for key in RESOURCE_KEYS}
    res.update(ex["stages"].get(stage) or {})
    return res


def closer_resources(cfg: DictConfig) -> dict[str, Any]:
    """The resources of the job that ends the pipeline's MLflow run: those of the declared stage
    whose SPEC says hosts_closer (its executor.stages.<stage> on top; the profile's alone
    without one), on one task without a GPU."""
    stages = load(str(cfg.pipeline.file)).stages
    host = next((s for s, module in stages.items() if stage_spec(module).hosts_closer), None)
    res = stage_resources(cfg, host or "")  # "": no stage's, the profile's own
    return res | {"gpus_per_node": 0, "nodes": 1, "tasks_per_node": 1}


def check_profile(cfg: DictConfig, jobs: list[NodeJob]) -> None:
    """Raise ConfigError (one line) on a profile that SLURM or Lightning would reject later."""
    requeues = cfg.executor.max_requeues
    _require(isinstance(requeues, int) and requeues >= 0,
             f"executor.max_requeues={requeues} must be an integer >= 0")  # fmt: skip
    stages = {job.stage: job.trains for job in jobs}
    declared = load(str(cfg.pipeline.file)).stages
    for stage, extra in cfg.executor.stages.items():
        _require(stage in declared, f"executor.stages.{stage}: unknown stage; allowed: "
                 f"{', '.join(declared)}")  # fmt: skip
        unknown = sorted(set(extra or {}) - set(RESOURCE_KEYS))
        _require(not unknown, f"executor.stages.{stage}: unknown keys {unknown}; allowed: "
                 f"{', '.join(RESOURCE_KEYS)}")  # fmt: skip
    for stage, trains in stages.items():
        _check_stage_resources(stage, stage_resources(cfg, stage), trains)
    for job in jobs:
        if job.trains and job.done is None:
            _check_batch(job, stage_resources(cfg, job.stage))
    _check_partitions(cfg, stages)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_stage_resources(stage: str, res: dict[str, Any], trains: bool) -> None:
    key = f"executor (stage {stage})"
    timeout = res["timeout_min"]
    _require(timeout is not None, f"{key}: timeout_min is missing: set the job time limit in "
             "minutes (executor.timeout_min or executor.stages.<stage>.timeout_min)")  # fmt: skip
    _require(timeout > 0, f"{key}: timeout_min={timeout} must be > 0")
    delay = res["signal_delay_s"]
    _require(delay is not None and 0 < delay < timeout * 60,
             f"{key}: signal_delay_s={delay} must be > 0 and less than timeout_min x 60 = "
             f"{timeout * 60} (the time-out signal comes that long before the limit)")  # fmt: skip
    for name in ("nodes", "tasks_per_node", "cpus_per_task"):
        _require(int(res[name] or 0) >= 1, f"{key}: {name}={res[name]} must be >= 1")
    gpus = int(res["gpus_per_node"] or 0)
    _require(gpus >= 0, f"{key}: gpus_per_node={gpus} must be >= 0")
    if not trains:  # a stage that does not train runs in one process
        _require(res["nodes"] == 1 and res["tasks_per_node"] == 1,
                 f"{key}: nodes={res['nodes']}, tasks_per_node={res['tasks_per_node']}; this "
                 "stage runs in one process: both must be 1")  # fmt: skip
        return
    # Lightning DDP under SLURM expects one task per device (it reads SLURM_NTASKS_PER_NODE).
    _require(gpus == 0 or res["tasks_per_node"] == gpus,
             f"{key}: tasks_per_node={res['tasks_per_node']} must equal gpus_per_node={gpus} "
             "(Lightning DDP runs one task per GPU)")  # fmt: skip


def _check_batch(job: NodeJob, res: dict[str, Any]) -> None:
    """trainer.devices must be the job's devices per node, and the global batch a multiple of
    batch_size x devices x nodes (the rest is gradient accumulation, see ssmax.lit.trainer)."""
    cfg = OmegaConf.create(job.cfg_yaml)
    gpus, nodes = int(res["gpus_per_node"] or 0), int(res["nodes"])
    devices, num_nodes = cfg.trainer.devices, cfg.trainer.num_nodes
    _require(num_nodes in (1, nodes), f"{job.name}: trainer.num_nodes={num_nodes} but the "
             f"profile gives stage {job.stage} nodes={nodes}: leave trainer.num_nodes at 1 "
             "(the profile's nodes is used) or change the profile")  # fmt: skip
    per_node = gpus if gpus else res["tasks_per_node"]
    _require(devices == per_node, f"{job.name}: trainer.devices={devices} but the profile gives "
             f"{per_node} {'GPUs' if gpus else 'tasks'} per node to stage {job.stage}: set "
             f"trainer.devices={per_node} or change executor.stages.{job.stage}")  # fmt: skip
    objective = stage_spec(job.module).schedule  # trainer.<schedule>: its batch and steps
    _require(objective is not None, f"{job.name}: stage module {job.module} trains but its "
             "SPEC names no schedule (StageSpec.schedule: trainer.<schedule>)")  # fmt: skip
    s = cfg.trainer[objective]
    per_update = s.batch_size * devices * nodes
    _require(s.global_batch % per_update == 0,
             f"{job.name}: trainer.{objective}.global_batch={s.global_batch} must be a multiple "
             f"of batch_size x devices x nodes = {s.batch_size} x {devices} x {nodes} = "
             f"{per_update} (the rest is gradient accumulation)")  # fmt: skip


def _check_partitions(cfg: DictConfig, stages: dict[str, bool]) -> None:
    """Unknown partitions, asked of the cluster when it answers (`sinfo`); else left to sbatch."""
    wanted = {stage_resources(cfg, s)["partition"] for s in stages} - {None}
    if not wanted or shutil.which("sinfo") is None:
        return
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return
    known = {p.rstrip("*") for p in out.stdout.split()}
    for partition in sorted(wanted - known):
        raise ConfigError(f"executor.partition={partition!r} is unknown on this cluster; sinfo "
                          f"lists: {', '.join(sorted(known))}")  # fmt: skip


def check_cluster() -> None:
    """SLURM answers here: sbatch is installed and the controller replies to sinfo. Said in
    one line before anything is submitted (sbatch's own errors span several)."""
    hint = "start the local cluster (make cluster-up) or use executor=local or executor=inprocess"
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        raise ConfigError(f"executor=slurm: SLURM is not installed here (no sbatch); {hint}")
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                             timeout=30)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ConfigError(f"executor=slurm: sinfo gave no answer in 30 s; {hint}") from None
    if out.returncode != 0:
        lines = [line for line in out.stderr.splitlines() if line.strip()] or ["no answer"]
        raise ConfigError(
            f"executor=slurm: the SLURM controller does not answer (sinfo: {lines[-1].strip()}); "
            f"{hint}"
        )
