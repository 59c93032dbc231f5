"""A variant started from another's pretrain output, named by its facts.start: (e) and (f) put
SSMax into (a)'s weights with s = 1 / mean log n (Sec. 3 (e), (f)).

(e) takes (a)'s final weights and does not train. (f) takes (a)'s weights at the switch point
and trains the remaining steps with a fresh LR warmup of pipeline.switch_warmup_fraction of
them (the paper's 1,000 of 25,000: 4%, kept at every scale). Its optimizer state starts fresh:
s is a new parameter and the paper restarts the schedule, so (a)'s Adam moments are dropped
(a choice; the paper is silent). Its data continues (a)'s from the switch point: (f) trains on
what (a) would have trained on next (data_step<N>.json beside (a)'s switch-point weights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ssmax.config.variants import facts
from ssmax.stages.context import StageContext, train_cfg
from ssmax.stages.costing import BYTES_TRAINING, BYTES_WEIGHTS, StageCost, parameters, training
from ssmax.stages.pretrain import schedule
from ssmax.stages.spec import PRETRAIN_READS, StageSpec

if TYPE_CHECKING:
    from pathlib import Path

    from omegaconf import DictConfig

SPEC = StageSpec(
    reads=(*PRETRAIN_READS, "variant.facts.start", "pipeline.switch_warmup_fraction"),
    trains=True,
    uses=("trainer", "data"),
    reported_as="pretrain",  # a variant's pretraining node is pretrain's or switch's
    schedule="pretrain",
    bundle="train",
)  # fmt: skip


def cost(cfg: DictConfig, stage: str, inputs: list[str]) -> StageCost:
    """From the final weights: none (validation loss only); from the switch point: the steps
    the start variant's pretrain node had left (schedule), on the corpus. Its model.pt, and
    last.ckpt with AdamW's moments where it takes a step."""
    start = cfg.variant.facts.start
    steps = 0
    if start.checkpoint != "weights":
        total, switch_step = schedule(cfg, facts(start.variant).pretrain)
        steps = total - switch_step
    tokens = steps * cfg.trainer.pretrain.global_batch * cfg.data.seq_len
    disk = parameters(cfg) * (BYTES_TRAINING * (steps > 0) + BYTES_WEIGHTS)
    return training(cfg, tokens, disk, corpus=True)


def train_start(ctx: StageContext) -> tuple[DictConfig, str | None]:
    """(training config, data_start) this stage gives ssmax.lit.trainer.train (the seed
    bundle's too, ssmax.pipeline.bundle_run): the start variant's weights, and from its switch
    point the remaining steps, a fresh warmup and its data position."""
    softmax = ctx.only_input()
    cfg = train_cfg(ctx, "pretrain")
    data_start = None
    checkpoint = cfg.variant.facts.start.checkpoint  # an output of the start variant's node
    cfg.init_from = softmax[checkpoint]
    if checkpoint == "weights":  # the final weights: no training, validation loss only
        cfg.trainer.pretrain.max_steps = 0
    else:  # the switch point: the remaining steps
        remaining = softmax["steps"] - softmax["switch_step"]
        cfg.trainer.pretrain.max_steps = remaining
        warmup = round(float(cfg.pipeline.switch_warmup_fraction) * remaining)
        cfg.trainer.pretrain.warmup_steps = max(1, warmup)
        data_start = softmax["switch_data"]
    return cfg, data_start


def run(ctx: StageContext) -> dict[str, Any]:
    # lazy: ssmax.lit imports Lightning (~4 s on 2 cores); the pipeline process imports every
    # stage module (its SPEC and cost: plan) and stays without it
    from ssmax.lit.trainer import train

    cfg, data_start = train_start(ctx)
    result = train(cfg, data_start)
    return {
        "weights": str(result.weights),
        "steps": int(cfg.trainer.pretrain.max_steps),
        "train_loss": result.metrics.get("train/loss"),
        "val_loss": result.metrics.get("val/loss"),
        "run_id": result.run_id,
    }


def seed_outputs(cfg: DictConfig, folder: Path) -> dict[str, Any]:
    """A bundled seed's outputs between its weights and its losses, as run() writes them (its
    training config cfg: ssmax.pipeline.bundle_run)."""
    return {"steps": int(cfg.trainer.pretrain.max_steps)}
