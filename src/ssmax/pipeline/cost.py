"""What a pipeline will cost, before it runs (`python -m ssmax.pipeline plan`, `make plan`).

Per node and in total: tokens, FLOPs, GPU-hours at ``cost.mfu`` of ``cost.peak_flops`` (the
named ``cost.gpu``), disk for checkpoints and shards, and wall time with the GPUs the executor
gives the node (a SLURM profile's nodes x GPUs per stage; in process trainer.devices x
num_nodes for training, one GPU for an eval).

FLOPs per token, PaLM's convention (Chowdhery et al. 2022, App. B; the one bench_step.py
measures MFU against), N = all parameters, L layers, d width, T the context: training
6N + 12 L d T (attention scores and values; the causal half is not subtracted), a forward pass
2N + 4 L d T at its own context. Training counts the optimizer steps' tokens (validation
passes, under 0.1% at paper scale, are left out); SFT counts every example at the full
sequence length (an upper bound: batches are cut after their longest example).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from ssmax.config import model_config, variant_config
from ssmax.model import count_parameters
from ssmax.pipeline.run import NodeJob

SQUAD_FILTERED = 86_820  # Sec. 3.3: SQuAD 2.0 examples with context, question and answer
BYTES_TRAINING = 4 + 8  # per parameter in last.ckpt: fp32 weights and AdamW's two moments
BYTES_WEIGHTS = 4  # per parameter in model.pt / model_step<N>.pt
SHARD_BYTES = 2  # per token in uint16 shards


@dataclass
class NodeCost:
    name: str
    tokens: float
    flops: float
    gpus: int
    disk: float  # bytes
    inputs: list[str]

    def gpu_hours(self, throughput: float) -> float:
        return self.flops / throughput / 3600

    def wall_hours(self, throughput: float) -> float:
        return self.gpu_hours(throughput) / max(self.gpus, 1)


def per_token(cfg: DictConfig, context: int, training: bool) -> tuple[float, int]:
    """(FLOPs per token, N) of the node's model at a context of ``context`` tokens."""
    n = count_parameters(model_config(cfg), variant_config(cfg), cfg.data.seq_len)
    m = cfg.model
    attention = 4 * m.n_layers * m.dim * context
    return (6 * n + 3 * attention if training else 2 * n + attention), n


def node_cost(
    job: NodeJob, cfg: DictConfig, gpus: Callable[[NodeJob, DictConfig], int]
) -> NodeCost:
    stage, seq = job.module, cfg.data.seq_len  # what the node runs: its stage module
    flops_per, n = per_token(cfg, seq, training=True)
    tokens = flops = disk = 0.0
    if stage in ("pretrain", "switch"):
        steps = cfg.trainer.pretrain.max_steps
        switch_step = max(1, round(cfg.pipeline.switch_fraction * steps))
        facts = cfg.variant.facts
        if facts.pretrain == "short":
            steps = max(1, round(cfg.pipeline.pn_fraction * steps))
        if facts.start is not None:
            steps = 0 if facts.start.checkpoint == "weights" else steps - switch_step
        tokens = steps * cfg.trainer.pretrain.global_batch * seq
        flops = tokens * flops_per
        disk = n * (BYTES_TRAINING * (steps > 0) + BYTES_WEIGHTS * (1 + (stage == "pretrain")))
    elif stage == "sft":
        tokens = cfg.trainer.sft.epochs * sft_examples(cfg) * seq
        flops, disk = tokens * flops_per, n * (BYTES_TRAINING + BYTES_WEIGHTS)
    elif stage == "export":  # each model twice: its folder and its MLflow copy
        disk = n * BYTES_WEIGHTS * 2 * len(job.input_dirs)
    elif stage in ("eval_loss", "eval_niah"):
        for context, count in eval_passes(cfg, stage):
            tokens += count * context
            flops += count * context * per_token(cfg, context, training=False)[0]
    inputs = list(job.input_dirs)
    return NodeCost(job.name, tokens, flops, gpus(job, cfg) if flops else 0, disk, inputs)


def eval_passes(cfg: DictConfig, stage: str) -> list[tuple[int, int]]:
    """(context, number of forward passes over it) of an eval node (decoding steps and the
    copy probe are a rounding error and left out)."""
    seq, ev = cfg.data.seq_len, cfg.eval
    if stage == "eval_loss":  # prose (and planted facts, if on); 1x at the training theta
        long = (round(seq * ev.loss.max_multiple) + 1, int(ev.loss.sequences))
        facts = float(OmegaConf.select(cfg, "data.facts.fraction", default=0) or 0) > 0
        return [long] * (1 + facts) + [(seq + 1, int(ev.loss.sequences))]
    cells = len(ev.niah.depths) * int(ev.niah.samples)
    passes = [(int(m * seq), cells) for m in ev.niah.context_multiples]
    if ev.get("needle_scores") is not None:
        passes.append((round(ev.needle_scores.context_multiple * seq), 1 + ev.needle_scores.trials))
    return passes


def sft_examples(cfg: DictConfig) -> float:
    if cfg.data.sft_source == "squad_v2":
        return SQUAD_FILTERED
    kept = 1 - float(cfg.data.sft_unanswerable_fraction)
    return cfg.data.sft_num_examples * kept * (1 - float(cfg.data.sft_val_fraction))


def executor_gpus(base: DictConfig) -> Callable[[NodeJob, DictConfig], int]:
    """node, node config -> GPUs of its job."""
    if base.executor.kind == "slurm":
        from ssmax.pipeline.slurm import stage_resources

        def slurm(job: NodeJob, cfg: DictConfig) -> int:
            res = stage_resources(base, job.stage)
            return int(res["gpus_per_node"] or 0) * int(res["nodes"])

        return slurm
    return lambda job, cfg: cfg.trainer.devices * cfg.trainer.num_nodes if job.trains else 1


def plan_costs(base: DictConfig, jobs: list[NodeJob]) -> list[NodeCost]:
    gpus = executor_gpus(base)
    return [node_cost(job, OmegaConf.create(job.cfg_yaml), gpus) for job in jobs]


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
    lines = [
        f"\ncost: {c.gpu} at {float(c.mfu):.0%} MFU of {float(c.peak_flops) / 1e12:,.0f} "
        f"TFLOP/s = {throughput / 1e12:,.1f} TFLOP/s per GPU; wall time with the GPUs of {where}",
        "FLOPs/token: training 6N + 12 L d T, forward 2N + 4 L d T (PaLM's convention)",
        f"{'node':<42} {'tokens':>9} {'FLOPs':>9} {'GPU-h':>10} {'GPUs':>4} "
        f"{'wall':>8} {'disk':>8}",
    ]
    for n in costs:
        if n.flops or n.disk:
            lines.append(
                f"{n.name:<42} {_count(n.tokens):>9} {n.flops:>9.2e} "
                f"{_hours(n.gpu_hours(throughput)):>10} {n.gpus:>4} "
                f"{_duration(n.wall_hours(throughput)):>8} {_bytes(n.disk):>8}"
            )
    tokens, flops = sum(n.tokens for n in costs), sum(n.flops for n in costs)
    gpu_h = sum(n.gpu_hours(throughput) for n in costs)
    sequential = sum(n.wall_hours(throughput) for n in costs)
    read = max((n.tokens for n in costs if n.name.startswith("pretrain/")), default=0)
    lines += [
        f"{'total':<42} {_count(tokens):>9} {flops:>9.2e} {_hours(gpu_h):>10} {'':>4} "
        f"{_duration(sequential):>8} {_bytes(sum(n.disk for n in costs)):>8}",
        f"wall: {_duration(sequential)} one node after another, "
        f"{_duration(critical_path_hours(costs, throughput))} with independent nodes side by "
        "side (enough GPUs)",
        f"shards (data.shards_dir, uint16): {_bytes(read * SHARD_BYTES)} for the "
        f"{_count(read)} tokens one pretraining reads; preparing a whole corpus takes 2 bytes "
        "per token of it (SlimPajama-627B train: ~1.25 TB)",
    ]
    return "\n".join(lines)


def _count(x: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:.0f}"


def _duration(hours: float) -> str:
    if not hours:
        return "-"
    if hours >= 48:
        return f"{hours / 24:.1f} d"
    if hours >= 1:
        return f"{hours:.1f} h"
    return f"{hours * 60:.1f} min" if hours >= 1 / 60 else f"{hours * 3600:.2g} s"


def _hours(x: float) -> str:
    return f"{x:,.1f}" if x >= 1 else f"{x:.2g}"


def _bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / 1e3:.0f} kB" if n else "-"
