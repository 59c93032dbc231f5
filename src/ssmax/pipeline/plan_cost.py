"""What a pipeline will cost, before it runs (`python -m ssmax.pipeline plan`, `make plan`).

Each node's stage says what one node costs (its module's ``cost(cfg, stage, inputs)`` beside its
SPEC: tokens, FLOPs, disk, and which measured rate applies; ssmax.stages.costing); a stage
module that declares none is shown so and left out of the totals. From those, per node and in
total: GPU-hours, and wall time with the GPUs the executor gives the node (a SLURM profile's
nodes x GPUs per stage; in process trainer.devices x num_nodes for training, one GPU for an
eval). GPU-hours come from the rates `make bench` measured on ``cost.gpu`` for the node's model
(ssmax.pipeline.measured: training tokens/s, seconds per Fig. 5 sequence, seconds per needle
sample), each turned into the FLOP/s it reached and applied to the node's FLOPs; where none was
measured, from ``cost.mfu`` of ``cost.peak_flops``, an assumption the table marks as such.
Where the output folder already holds finished nodes of the same stage (another seed of the
variant, else another variant), their recorded wall times come first: the FLOP/s they reached
on this machine, or their seconds for a node that computes nothing (basis "done"). So after one
seed on a CPU, `make plan SEEDS=3,4,...` prints what more seeds take there, and the wall time
with the local executor's workers.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssmax.pipeline import measured
from ssmax.pipeline.job import NodeJob
from ssmax.pipeline.progress import duration
from ssmax.pipeline.slurm import stage_resources
from ssmax.stages.costing import StageCost, per_token
from ssmax.stages.spec import stage_module

SHARD_BYTES = 2  # per token in uint16 shards
CostFunction = Callable[[DictConfig, str, list[str]], StageCost]


@dataclass
class NodeCost:
    name: str
    tokens: float
    flops: float
    gpus: int
    disk: float  # bytes
    inputs: list[str]
    kind: str | None = None  # which measured rate applies: train, eval_loss, niah
    rate: measured.Rate | None = None  # what its GPU-hours come from, where measured
    flop_rate: float | None = None  # FLOP/s that measurement reached on this node's model
    seconds: float | None = None  # wall time from finished nodes of its stage (basis "done")
    corpus_tokens: float = 0.0  # pretraining corpus tokens it reads (data.shards_dir)
    undeclared: str | None = None  # its stage module, where that declares no cost
    cpu: bool = False  # a CPU preset's node: no GPU-hours; flop_rate is cost.cpu_flops
    cached: bool = False  # done in the output folder: a run takes nothing for it

    def gpu_hours(self, throughput: float) -> float:
        """Hours on one device: from finished twins' wall time where there are some, else at
        the measured FLOP/s where there is one, else at throughput. None on a CPU."""
        if self.cpu:
            return 0.0
        if self.seconds is not None:
            return self.seconds * max(self.gpus, 1) / 3600
        return self.flops / (self.flop_rate or throughput) / 3600

    def wall_hours(self, throughput: float) -> float:
        if self.cpu:
            seconds = self.seconds if self.seconds is not None else self.flops / self.flop_rate
            return seconds / 3600
        return self.gpu_hours(throughput) / max(self.gpus, 1)

    @property
    def basis(self) -> str:
        if self.seconds is not None:
            return "done"
        return "-" if not self.flops else "measured" if self.rate else "assumed"


def stage_cost(module: str) -> CostFunction | None:
    """The cost function a stage module declares beside its SPEC (ssmax.stages.<module>.cost);
    None where it declares none."""
    return getattr(stage_module(module), "cost", None)


def node_cost(
    job: NodeJob, cfg: DictConfig, gpus: Callable[[NodeJob, DictConfig], int]
) -> NodeCost:
    """What the node's stage says one of its nodes costs, on the executor's GPUs."""
    inputs, declared = list(job.input_dirs), stage_cost(job.module)
    if declared is None:
        return NodeCost(job.name, 0, 0, 0, 0, inputs, undeclared=job.module)
    c = declared(cfg, job.stage, inputs)
    gpu_count, kind = (gpus(job, cfg), c.rate) if c.flops else (0, None)
    return NodeCost(job.name, c.tokens, c.flops, gpu_count, c.disk, inputs, kind=kind,
                    corpus_tokens=c.corpus_tokens)  # fmt: skip


def measured_flop_rate(cfg: DictConfig, rate: measured.Rate) -> float:
    """The FLOP/s a measured rate reached on the node's model: training tokens/s x training
    FLOPs per token; an eval's items per second x the FLOPs of one item's forward pass."""
    if rate.kind == "train":
        return rate.value * per_token(cfg, rate.length, training=True)[0]
    return rate.length * per_token(cfg, rate.length, training=False)[0] / rate.value


def executor_gpus(base: DictConfig) -> Callable[[NodeJob, DictConfig], int]:
    """node, node config -> GPUs of its job."""
    if base.executor.kind == "slurm":

        def slurm(job: NodeJob, cfg: DictConfig) -> int:
            res = stage_resources(base, job.stage)
            return int(res["gpus_per_node"] or 0) * int(res["nodes"])

        return slurm
    return lambda job, cfg: cfg.trainer.devices * cfg.trainer.num_nodes if job.trains else 1


def plan_costs(base: DictConfig, jobs: list[NodeJob]) -> list[NodeCost]:
    """Every node's cost, at the rates measured on cost.gpu where the file has them; a CPU
    preset's (preset.hardware=cpu) at cost.cpu_flops, on no GPU."""
    gpus, rates = executor_gpus(base), measured.load(base.cost.measured_file)
    on_cpu = base.preset.hardware == "cpu"
    costs, configs = [], {}  # a variant's nodes share its config: parsed once
    for job in jobs:
        if job.cfg_yaml not in configs:
            configs[job.cfg_yaml] = OmegaConf.create(job.cfg_yaml)
        cfg = configs[job.cfg_yaml]
        cost = node_cost(job, cfg, gpus)
        if on_cpu:
            cost.cpu, cost.gpus, cost.flop_rate = True, 0, float(base.cost.cpu_flops)
        elif cost.kind:
            cost.rate = measured.lookup(rates, base.cost.gpu, cfg.model.name, cost.kind)
            cost.flop_rate = measured_flop_rate(cfg, cost.rate) if cost.rate else None
        if not job.inline:
            cost.seconds = seconds_from_twins(job, cost)
        cost.cached = job.done is not None
        costs.append(cost)
    return costs


def over_timeout(base: DictConfig, costs: list[NodeCost]) -> str | None:
    """The line for the first node to run whose estimated wall time passes what the local
    executor gives a node (executor.timeout_min: past it the node is killed and counted
    failed), from the plan's own estimate and its basis; None where every node fits, or for
    another executor (in process: no limit; SLURM: its jobs' limits, resumed on requeue)."""
    if base.executor.kind != "local":
        return None
    limit = float(base.executor.timeout_min)
    throughput = float(base.cost.peak_flops) * float(base.cost.mfu)
    for cost in costs:
        if cost.cached or not cost.flops:
            continue
        minutes = cost.wall_hours(throughput) * 60
        if minutes > limit:
            return (f"{cost.name} would take ~{duration(minutes / 60)} (the plan's estimate, "
                    f"basis {cost.basis}), past executor.timeout_min={limit:g} after which the "
                    f"local executor kills a node; raise executor.timeout_min to at least "
                    f"{math.ceil(minutes * 1.5)} or run it with another executor")  # fmt: skip
    return None


def seconds_from_twins(job: NodeJob, cost: NodeCost) -> float | None:
    """The node's wall time from finished nodes of its stage in the same output folder: the
    variant's other seeds, else other variants; the median of their seconds, each scaled by
    this node's FLOPs over the FLOPs its done record holds (taken as they are where either
    computes none; a record without FLOPs, from before they were kept, counts for its own
    variant only). None without any."""
    stage = Path(job.dir).parents[2]  # nodes/<stage>/<variant>/seed<N>/<fingerprint>
    own = f"{Path(job.dir).parents[1].name}/seed*/*/done.json"
    for pattern in (own, "*/seed*/*/done.json"):
        seconds = []
        for done in stage.glob(pattern):
            try:
                record = json.loads(done.read_text())
                wall, flops = float(record["wall_s"]), record.get("flops")
            except (OSError, ValueError, KeyError, TypeError):
                continue  # unreadable: not a measurement
            if flops is None and pattern != own:
                continue
            scale = cost.flops / float(flops) if flops and cost.flops else 1.0
            seconds.append(wall * scale)
        if seconds:
            return statistics.median(seconds)
    return None


def critical_path_hours(costs: list[NodeCost], throughput: float) -> float:
    """Wall time when every node starts as soon as its inputs are done (enough GPUs)."""
    finish: dict[str, float] = {}
    for c in costs:  # inputs come first
        finish[c.name] = c.wall_hours(throughput) + max((finish[i] for i in c.inputs), default=0)
    return max(finish.values(), default=0.0)


def downstream_flops(costs: list[NodeCost]) -> dict[str, float]:
    """Each node's FLOPs plus the heaviest chain of nodes that wait on it: the order in which
    a few workers should start ready nodes (longest remaining path first)."""
    own = {c.name: c.flops for c in costs}
    level = dict(own)
    for c in reversed(costs):  # dependants come after their inputs: level[c.name] is final
        for i in c.inputs:
            level[i] = max(level[i], own[i] + level[c.name])
    return level


def format_costs(base: DictConfig, costs: list[NodeCost]) -> str:
    """The cost table: one line per node that computes, then the totals."""
    c = base.cost
    throughput = float(c.peak_flops) * float(c.mfu)
    if base.executor.kind == "slurm":
        where = f"the SLURM profile (partition {base.executor.partition})"
    else:  # in process: trainer.devices x num_nodes for training, one GPU per eval
        where = (f"executor={base.executor.kind}: trainer.devices x num_nodes; a cluster: "
                 "executor=slurm executor/slurm/profile=<name>")  # fmt: skip
    cpu = base.preset.hardware == "cpu"
    on = (
        f" on {'a CPU' if cpu else c.gpu}"
        if any(n.flops and n.seconds is None for n in costs)
        else ""
    )
    devices = "one worker a node" if cpu else f"the GPUs of {where}"
    lines = [
        f"\ncost{on}; wall time with {devices}",
        *rate_lines(base, costs, throughput),
        "FLOPs/token: training 6N + 12 L d T, forward 2N + 4 L d T (PaLM's convention)",
        f"{'node':<42} {'tokens':>9} {'FLOPs':>9} {'GPU-h':>10} {'basis':>8} {'GPUs':>4} "
        f"{'wall':>8} {'disk':>8}",
    ]
    for n in costs:
        if n.undeclared and n.seconds is None:
            lines.append(f"{n.name:<42} no cost declared (ssmax.stages.{n.undeclared})")
        elif n.flops or n.disk or n.seconds:
            gpu_h, gpus = ("-", "cpu") if n.cpu else (_hours(n.gpu_hours(throughput)), n.gpus)
            lines.append(
                f"{n.name:<42} {_count(n.tokens):>9} {n.flops:>9.2e} "
                f"{gpu_h:>10} {n.basis:>8} {gpus:>4} "
                f"{duration(n.wall_hours(throughput)):>8} {_bytes(n.disk):>8}"
            )
    tokens, flops = sum(n.tokens for n in costs), sum(n.flops for n in costs)
    gpu_h = sum(n.gpu_hours(throughput) for n in costs)
    sequential = sum(n.wall_hours(throughput) for n in costs)
    read = max((n.corpus_tokens for n in costs), default=0)
    lines += [
        f"{'total':<42} {_count(tokens):>9} {flops:>9.2e} {'-' if cpu else _hours(gpu_h):>10} "
        f"{'':>8} {'':>4} "
        f"{duration(sequential):>8} {_bytes(sum(n.disk for n in costs)):>8}",
        f"wall: {duration(sequential)} one node after another, "
        f"{duration(critical_path_hours(costs, throughput))} with independent nodes side by "
        f"side (enough {'cores' if cpu else 'GPUs'})" + _workers_wall(base, costs, throughput),
        f"shards (data.shards_dir, uint16): {_bytes(read * SHARD_BYTES)} for the "
        f"{_count(read)} tokens one pretraining reads; preparing a whole corpus takes 2 bytes "
        "per token of it (SlimPajama-627B train: ~1.25 TB)",
    ]
    lines += _left_line(base, costs, throughput)
    unknown = [n for n in costs if n.undeclared and n.seconds is None]
    if unknown:
        modules = ", ".join(sorted({f"ssmax.stages.{n.undeclared}" for n in unknown}))
        lines.append(f"not counted: {len(unknown)} nodes whose stage declares no cost ({modules}: "
                     "no cost(cfg, stage, inputs) beside its SPEC)")  # fmt: skip
    return "\n".join(lines)


def _left_line(base: DictConfig, costs: list[NodeCost], throughput: float) -> list[str]:
    """What a run of this plan takes where some nodes are cached (they take nothing): the
    totals above are those of every node."""
    left = [c for c in costs if not c.cached]
    if len(left) == len(costs):
        return []
    sequential = sum(c.wall_hours(throughput) for c in left)
    after = [c if not c.cached else replace(c, seconds=0.0, flops=0.0, cpu=True) for c in costs]
    return [f"left to run ({len(left)} of {len(costs)} nodes; the cached ones take nothing): "
            f"{duration(sequential)} one node after another, "
            f"{duration(critical_path_hours(after, throughput))} with independent nodes side by "
            f"side" + _workers_wall(base, after, throughput)]  # fmt: skip


def _workers_wall(base: DictConfig, costs: list[NodeCost], throughput: float) -> str:
    if base.executor.kind != "local":
        return ""
    workers = int(base.executor.workers)
    return (f", {duration(scheduled_hours(costs, throughput, workers))} with executor.workers="
            f"{workers}")  # fmt: skip


def scheduled_hours(costs: list[NodeCost], throughput: float, workers: int) -> float:
    """Wall time on ``workers`` slots as the local executor fills them: a node starts when its
    inputs are done and a slot is free, in its order (the heaviest remaining chain first);
    nodes that take no time (inline) take no slot."""
    own = {c.name: c.wall_hours(throughput) for c in costs}
    remaining = downstream_flops(costs)  # the executor's order (local.run_local)
    finish = {i: 0.0 for c in costs for i in c.inputs if i not in own}  # outside the plan
    running: dict[str, float] = {}
    pending, now, started = sorted(costs, key=lambda c: -remaining[c.name]), 0.0, True
    while started or running:
        started = False
        for c in list(pending):
            if all(finish.get(i, float("inf")) <= now for i in c.inputs):
                if own[c.name] and len(running) >= workers:
                    continue
                finish[c.name] = now + own[c.name]
                if own[c.name]:
                    running[c.name] = finish[c.name]
                pending.remove(c)
                started = True
        if not started and running:  # the next node to finish frees its slot
            now = min(running.values())
            running = {n: t for n, t in running.items() if t > now}
            started = True
    return max(finish.values(), default=0.0)


def rate_lines(base: DictConfig, costs: list[NodeCost], throughput: float) -> list[str]:
    """Where each kind of node's GPU-hours come from: finished nodes' wall times, a measured
    rate (what, when, on what) or the assumed MFU."""
    c, lines = base.cost, []
    done = [n for n in costs if n.seconds is not None]
    if done:
        where = base.paths.output_dir
        lines.append(f"  {len(done)} nodes (basis done): from the wall times of finished nodes "
                     f"of their stage in {where} (this machine, as they ran)")  # fmt: skip
    if base.preset.hardware == "cpu":
        if any(n.flops and n.seconds is None for n in costs):
            lines.append(f"  CPU nodes: assumed {float(c.cpu_flops) / 1e9:,.0f} GFLOP/s a node "
                         f"(cost.cpu_flops, the tiny preset's on 2 Xeon cores); after one seed "
                         "has finished here, its nodes' wall times")  # fmt: skip
        return lines
    for kind, label in measured.LABELS.items():
        nodes = [n for n in costs if n.kind == kind and n.seconds is None]
        rates = {n.rate for n in nodes if n.rate}
        for rate in sorted(rates, key=lambda r: r.device):
            lines.append(f"  {label}: {rate.describe()}")
        if any(n.rate is None for n in nodes):
            lines.append(
                f"  {label}: assumed {float(c.mfu):.0%} MFU of {float(c.peak_flops) / 1e12:,.0f} "
                f"TFLOP/s = {throughput / 1e12:,.1f} TFLOP/s (nothing measured for {c.gpu} and "
                f"this model in {measured.resolve(c.measured_file).name}: `make bench` on one)"
            )
    return lines


def _count(x: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:.0f}"


def _hours(x: float) -> str:
    return f"{x:,.1f}" if x >= 1 else f"{x:.2g}"


def _bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / 1e3:.0f} kB" if n else "-"
