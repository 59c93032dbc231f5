"""The schema of `python -m ssmax.pipeline` (conf/pipeline.yaml, PipelineConfig): every group of
`python -m ssmax.train`'s (ssmax.config.schema, TrainConfig) plus the pipeline's own: how the
DAG is run (pipeline), the paper's protocol its stages follow (protocol), `plan`'s cost table
(cost). Registered with Hydra beside TrainConfig (ssmax.config.compose.store_schemas).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ssmax.config.schema import MAX_SEED, TrainConfig, rule


@dataclass
class PipelineSettings:
    file: str = "paper"  # pipelines/<file>.yaml: stages, variants, edges (make PIPELINE=...)
    variants: list[str] | None = rule(None, min_items=1, unique=True)  # null: the declaration's
    seeds: list[int] | None = rule(  # null: the declaration's
        None, ge=0, le=MAX_SEED, min_items=1, unique=True
    )
    strict_reads: bool = False  # each stage sees only the config keys its SPEC declares
    targets: list[str] | None = rule(None, min_items=1, unique=True)  # stages to run, with inputs
    overrides: dict[str, list[str]] = rule({})  # one variant's overrides, {b_ssmax: [k=v]}


@dataclass
class ProtocolConfig:
    """The paper's protocol as the pipeline's stages run it (pipeline.* is how they are run):
    where (f) switches and with what warmup (stages pretrain, switch), how much shorter (pn)
    pretrains (pretrain), the factor on RoPE theta at the evals (rope_pretrained, rope_sft)."""

    switch_fraction: float = rule(0.875, gt=0, lt=1)  # Sec. 3 (f): 175k of 200k steps with softmax
    switch_warmup_fraction: float = rule(0.04, ge=0, le=1)  # Sec. 3 (f): 1,000 of the last 25,000
    pn_fraction: float = rule(0.125, gt=0, le=1)  # Sec. 2.1: 25k iterations vs 200k
    rope_factor: int | float = rule(50, gt=0)  # Sec. 3.2, 3.3: eval theta 10,000 -> 500,000


# keys of an earlier release -> their key now: the old one fails in one line naming the new one
# (ssmax.config.compose.check_override_keys, ssmax.config.rules.one_line)
MOVED_KEYS = {f"pipeline.{name}": f"protocol.{name}" for name in (
    "switch_fraction", "switch_warmup_fraction", "pn_fraction", "rope_factor")}  # fmt: skip


@dataclass
class CostConfig:
    """`plan`'s cost table (ssmax.pipeline.plan_cost); the paper gives no costs."""

    gpu: str = "H100"  # the GPU costed: measured rates of a device whose name contains it
    # null: the project's bench/throughput.json (written by `make bench` on a GPU)
    measured_file: str | None = None  # the measured rates (ssmax.pipeline.measured)
    peak_flops: float = rule(989.0e12, gt=0)  # NVIDIA's H100 SXM bf16 dense peak
    mfu: float = rule(0.40, gt=0, le=1)  # assumed MFU where nothing was measured
    # about what the tiny preset's nodes reach on a CPU core each (docs/tiny-scale.md, "What a
    # seed costs")
    cpu_flops: float = rule(2.5e10, gt=0)  # FLOP/s of a CPU preset's node before any finished


@dataclass
class PipelineConfig(TrainConfig):
    """`python -m ssmax.pipeline` (conf/pipeline.yaml): TrainConfig's groups plus these."""

    pipeline: PipelineSettings = field(default_factory=PipelineSettings)  # the declaration
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)  # the paper's protocol
    cost: CostConfig = field(default_factory=CostConfig)  # `plan`'s cost table
