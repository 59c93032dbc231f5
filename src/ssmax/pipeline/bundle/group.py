"""Seeds bundled (executor.bundle=K, issue 59): which to-run nodes go together, as one job.

The training nodes (of a stage whose SPEC says bundle="train": pretraining from scratch, (e)
and (f)'s switch, SFT) of one stage and variant whose configs are equal but for the seed are
grouped, up to K at a time in DAG order, into a BundleJob that an executor runs as one unit
(ssmax.pipeline.bundle.train.execute_bundle: one ssmax.lit.bundle.run.BundleRun for all, each seed
from its own inputs' weights and data position, then each seed's node folder, MLflow run and
done record as its solo node writes them). A node stays solo where a bundle would not train it
as its solo run does (why_solo), and a group of one is a solo node. The eval nodes
(bundle="evals") are grouped the same way and evaluated seed after seed in one process
(ssmax.pipeline.bundle.evals), once all their inputs are finished. Nothing here changes a
node: its fingerprint, folder and record name are the planned ones, so a node cached
stays cached whichever way it was made.

"Equal but for the seed" is checked twice: the node's composed config without the keys that
name its seed (seed, paths.run_dir, run_name), and its fingerprint recomputed with seed 0
(seedless_fingerprint; it also names the bundle's checkpoint folder).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError
from ssmax.data.corpus import is_streaming
from ssmax.pipeline.fingerprint import fingerprint
from ssmax.pipeline.job import NodeJob
from ssmax.stages.spec import stage_spec

# StageSpec.bundle: a bundle trains its nodes' seeds as one (ssmax.pipeline.bundle.train), or
# evaluates them seed after seed (ssmax.pipeline.bundle.evals)
TRAIN, EVALS = "train", "evals"
PRECISIONS = ("auto", "32-true", "32", "64-true", "bf16-mixed")  # ssmax.lit.bundle.precision's
SEED_KEYS = ("seed", "paths.run_dir", "run_name")  # a node's config keys that name its seed


@dataclass
class BundleJob:
    """Nodes of one stage and variant, equal but for the seed, run as one job. Executors treat
    it as a node without inputs (name, dir, threads, ...); settle() gives its members' states."""

    members: list[NodeJob]
    dir: str  # its checkpoints' folder (ssmax.pipeline.bundle.train)
    threads: int | None = None
    inline: bool = False

    @property
    def input_dirs(self) -> dict[str, str]:
        """Its members' inputs, all (it starts once they are finished); from scratch: none."""
        return {k: v for m in self.members for k, v in m.input_dirs.items()}

    @property
    def seeds(self) -> list[int]:
        return [int(m.seed) for m in self.members]  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        first = self.members[0]
        return f"{first.stage}/{first.variant}/seeds{seed_list(self.seeds)}"

    @property
    def module(self) -> str:
        return self.members[0].module

    @property
    def remaining(self) -> float:
        return max(m.remaining for m in self.members)

    @property
    def done(self) -> None:
        return None  # its members are cached or not, each for itself


def seed_list(seeds: list[int]) -> str:
    """0-2 for [0, 1, 2], 0,2,5 otherwise: a bundle's name."""
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 1:
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def check_bundle(cfg: DictConfig) -> None:
    """executor.bundle > 1 where bundles run: this process or local workers (ConfigError: one
    line). A SLURM job runs one node; a bundle as one job there is not wired (docs/training.md,
    "Seeds bundled")."""
    size = int(cfg.executor.bundle)
    if size > 1 and cfg.executor.kind == "slurm":
        raise ConfigError(f"executor.bundle={size} runs with executor=inprocess or "
                          "executor=local; executor=slurm runs each node as its own job: set "
                          "executor.bundle=0")  # fmt: skip


def why_solo(job: NodeJob, cfg: DictConfig) -> str | None:
    """Why a bundle would not train this node as its solo run does; None: it would."""
    t, spec = cfg.trainer, stage_spec(job.module)
    # from scratch: no input (the DAG's first node of a variant); the others start from their
    # one input's weights
    scratch = not job.input_dirs
    if scratch and (cfg.init_from or cfg.variant.s_init == "inv_mean_log_n"):
        return "it starts from other weights"
    if not scratch and len(job.input_dirs) != 1:
        return f"it reads {len(job.input_dirs)} nodes (a bundled seed starts from one)"
    if job.stage in cfg.variant.facts.inherit:
        return "it takes its start variant's model as it is (no training)"
    if t.devices * t.num_nodes != 1:
        return "it trains on several devices"
    if str(t.precision) not in PRECISIONS:
        return f"trainer.precision={t.precision} (a bundle runs {', '.join(PRECISIONS)})"
    # a stage that trains on the pretraining corpus (as ssmax.pipeline.fingerprint reads it)
    corpus = "data:lm" in spec.reads
    if corpus and is_streaming(cfg.data) and not cfg.data.shards_dir:
        return "its data is a stream, whose position only a Lightning run keeps"
    return None


def seedless_config(cfg: DictConfig) -> str:
    """The node's config as YAML without the keys that name its seed."""
    copy = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    for key in SEED_KEYS:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(copy, parent) if parent else copy
        node.pop(leaf, None)
    return OmegaConf.to_yaml(copy, sort_keys=True)


def seedless_fingerprint(job: NodeJob, cfg: DictConfig) -> str:
    """The node's fingerprint were its seed 0: equal for nodes that differ only by seed."""
    copy = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    copy.seed = 0
    return fingerprint(job.stage, job.module, stage_spec(job.module), copy, [])


def bundle_dir(output_dir: str | Path, job: NodeJob, seedless: str) -> Path:
    return Path(output_dir) / "pipeline" / "bundles" / job.stage / str(job.variant) / seedless[:16]


def bundled(cfg: DictConfig, jobs: list[NodeJob], log: Any) -> list[NodeJob | BundleJob]:
    """The jobs with the to-run nodes that go together (above) replaced by BundleJobs of up to
    executor.bundle nodes (chunk), each where its first member stood, or later where its
    members' inputs come later (in_order: inputs still come first)."""
    size = int(cfg.executor.bundle)
    if size <= 1:
        return list(jobs)
    groups: dict[tuple[str, ...], list[NodeJob]] = {}
    folders: dict[tuple[str, ...], Path] = {}
    for job in jobs:
        kind = stage_spec(job.module).bundle
        if kind is None or job.done is not None:
            continue
        node_cfg = OmegaConf.create(job.cfg_yaml)
        why = why_solo(job, node_cfg) if kind == TRAIN else None
        if why:
            log(f"solo    {job.name}: not bundled, {why}")
            continue
        seedless = seedless_fingerprint(job, node_cfg)
        text = hashlib.sha256(seedless_config(node_cfg).encode()).hexdigest()
        key = (job.stage, job.module, str(job.variant), seedless, text)
        groups.setdefault(key, []).append(job)
        folders[key] = bundle_dir(cfg.paths.output_dir, job, seedless)
    first: dict[str, BundleJob] = {}
    inside: set[str] = set()
    for key, members in groups.items():
        step = chunk(size, len(members), key[1], cfg)
        for i in range(0, len(members), step):
            part = members[i : i + step]
            if len(part) > 1:
                first[part[0].name] = BundleJob(part, str(folders[key]))
                inside.update(m.name for m in part)
    out: list[NodeJob | BundleJob] = []
    for job in jobs:
        if job.name in first:
            out.append(first[job.name])
        elif job.name not in inside:
            out.append(job)
    return in_order(out)


def in_order(units: list[NodeJob | BundleJob]) -> list[NodeJob | BundleJob]:
    """The units in their order, except that one whose inputs come later (a bundle of seeds
    whose later seeds' inputs do) waits for them, and its dependants with it: the in-process
    executor runs them in this order."""
    planned = {n.name for u in units for n in nodes_of(u)}
    out: list[NodeJob | BundleJob] = []
    placed: set[str] = set()
    waiting: list[NodeJob | BundleJob] = []

    def ready(unit: NodeJob | BundleJob) -> bool:
        return all(i in placed or i not in planned for i in unit.input_dirs)

    def place(unit: NodeJob | BundleJob) -> None:
        out.append(unit)
        placed.update(n.name for n in nodes_of(unit))
        while now := [w for w in waiting if ready(w)]:  # those it let go, in their order
            for w in now:
                waiting.remove(w)
                out.append(w)
                placed.update(n.name for n in nodes_of(w))

    for unit in units:
        if ready(unit):
            place(unit)
        else:
            waiting.append(unit)
    return out + waiting  # none left waiting: every input is planned before its node


def chunk(size: int, count: int, module: str, cfg: DictConfig) -> int:
    """Seeds a bundle of a group of `count` nodes takes: executor.bundle; for evals under the
    local executor no more than leaves each worker a bundle (evaluated one after another, a
    bundle of K seeds would put K workers' nodes side by side into one process)."""
    if stage_spec(module).bundle != EVALS or cfg.executor.kind != "local":
        return size
    return max(1, min(size, -(-count // int(cfg.executor.workers))))


def nodes_of(job: NodeJob | BundleJob) -> list[NodeJob]:
    return job.members if isinstance(job, BundleJob) else [job]


def blocked_nodes(job: NodeJob | BundleJob, states: dict[str, str]) -> tuple[dict[str, str], bool]:
    """The job's nodes an input of which failed or was blocked, as blocked, and whether that is
    the whole job; a bundle goes on without the others (taken out of its members)."""
    cut = {n.name: "blocked" for n in nodes_of(job)
           if any(states.get(i) in ("failed", "blocked") for i in n.input_dirs)}  # fmt: skip
    whole = len(cut) == len(nodes_of(job))
    if cut and not whole and isinstance(job, BundleJob):
        job.members = [m for m in job.members if m.name not in cut]
    return cut, whole


def settle(job: NodeJob | BundleJob, state: str) -> dict[str, str]:
    """Node -> state once a job ended in `state`: a bundle's members each by their own done
    record (a bundle that failed midway may have finished some seeds)."""
    if not isinstance(job, BundleJob):
        return {job.name: state}
    return {m.name: "done" if m.done is not None else "failed" for m in job.members}


def time_limit(job: NodeJob | BundleJob, per_node_s: float) -> float:
    """A job's time limit: a bundle does its members' work, so up to theirs together."""
    return per_node_s * len(nodes_of(job))
