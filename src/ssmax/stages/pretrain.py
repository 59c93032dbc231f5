"""Pretraining from scratch: the full run, or pipeline.pn_fraction of it for a variant whose
facts say `pretrain: short` (the p_n model of Sec. 2.1).

Every pretrain node also saves its weights at pipeline.switch_fraction of its steps (87.5%,
175k of 200k at paper scale), and where its data stood then, which switch(f) starts from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ssmax.stages.context import StageContext, train_cfg
from ssmax.stages.costing import BYTES_TRAINING, BYTES_WEIGHTS, StageCost, parameters, training
from ssmax.stages.spec import PRETRAIN_READS, StageSpec

if TYPE_CHECKING:
    from pathlib import Path

    from omegaconf import DictConfig

SPEC = StageSpec(
    reads=(*PRETRAIN_READS, "variant.facts.pretrain", "pipeline.pn_fraction"),
    trains=True,
    uses=("trainer", "data"),
    reported_as="pretrain",
    schedule="pretrain",
    bundle="train",
)  # fmt: skip


def schedule(cfg: DictConfig, pretrain: str) -> tuple[int, int]:
    """(steps, switch step) of a pretrain node of a variant whose facts say ``pretrain``: the
    full run, or for `short` pipeline.pn_fraction of it (Sec. 2.1: 25k of the main run's 200k
    iterations); the switch point at pipeline.switch_fraction of its steps."""
    steps = cfg.trainer.pretrain.max_steps
    if pretrain == "short":
        steps = max(1, round(cfg.pipeline.pn_fraction * steps))
    return steps, max(1, round(cfg.pipeline.switch_fraction * steps))


def cost(cfg: DictConfig, stage: str, inputs: list[str]) -> StageCost:
    """Its steps' tokens, from the corpus; last.ckpt with AdamW's moments (where it takes a
    step), model.pt and the switch point's weights."""
    steps, _ = schedule(cfg, cfg.variant.facts.pretrain)
    tokens = steps * cfg.trainer.pretrain.global_batch * cfg.data.seq_len
    disk = parameters(cfg) * (BYTES_TRAINING * (steps > 0) + 2 * BYTES_WEIGHTS)
    return training(cfg, tokens, disk, corpus=True)


def train_start(ctx: StageContext) -> tuple[DictConfig, str | None]:
    """(training config, data_start) this stage gives ssmax.lit.trainer.train (the seed
    bundle's too, ssmax.pipeline.bundle_run): the schedule's steps, the switch point saved."""
    cfg = train_cfg(ctx, "pretrain")
    steps, switch_step = schedule(cfg, cfg.variant.facts.pretrain)
    cfg.trainer.pretrain.max_steps = steps
    cfg.trainer.save_weights_at = [switch_step]
    return cfg, None


def run(ctx: StageContext) -> dict[str, Any]:
    # lazy: ssmax.lit imports Lightning (~4 s on 2 cores); the pipeline process imports every
    # stage module (its SPEC and cost: plan) and stays without it
    from ssmax.lit.trainer import data_state_path, train

    cfg, _ = train_start(ctx)
    steps, switch_step = int(cfg.trainer.pretrain.max_steps), int(cfg.trainer.save_weights_at[0])
    result = train(cfg)
    return {
        "weights": str(result.weights),
        "switch_point": str(result.extra_weights[switch_step]),
        "switch_data": str(data_state_path(result.extra_weights[switch_step])),
        "switch_step": switch_step,
        "steps": steps,
        "train_loss": result.metrics.get("train/loss"),
        "val_loss": result.metrics.get("val/loss"),
        "run_id": result.run_id,
    }


def seed_outputs(cfg: DictConfig, folder: Path) -> dict[str, Any]:
    """A bundled seed's outputs between its weights and its losses, as run() writes them (its
    training config cfg, its node's folder: ssmax.pipeline.bundle_run)."""
    # lazy: ssmax.lit imports Lightning (~4 s on 2 cores); the pipeline process imports every
    # stage module (its SPEC and cost: plan) and stays without it
    from ssmax.lit.trainer import data_state_path

    switch_step = int(cfg.trainer.save_weights_at[0])
    switch = folder / f"model_step{switch_step}.pt"
    return {"switch_point": str(switch), "switch_data": str(data_state_path(switch)),
            "switch_step": switch_step, "steps": int(cfg.trainer.pretrain.max_steps)}  # fmt: skip
