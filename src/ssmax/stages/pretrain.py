"""Pretraining from scratch: the full run, or protocol.pn_fraction of it for a variant whose
facts say `pretrain: short` (the p_n model of Sec. 2.1).

Every pretrain node also saves its weights at protocol.switch_fraction of its steps (87.5%,
175k of 200k at paper scale), and where its data stood then, which switch(f) starts from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ssmax.lit.plan import Steps, TrainingPlan, data_state_path
from ssmax.stages.context import StageContext, node_plan
from ssmax.stages.costing import BYTES_TRAINING, BYTES_WEIGHTS, StageCost, parameters, training
from ssmax.stages.outputs import Trained, fields_of
from ssmax.stages.spec import PRETRAIN_READS, StageSpec
from ssmax.stages.training import trained

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass(frozen=True, kw_only=True)
class Outputs(Trained):
    """Its weights and losses (Trained), the switch point (its weights, where its data stood:
    switch(f) starts there) and its steps."""

    switch_point: str
    switch_data: str | None = None  # absent from records made before 2026-11-23
    switch_step: int
    steps: int


def columns(out: Trained) -> dict[str, float | None]:
    """Its cell of the results table (switch's too: a variant's pretraining node is either)."""
    return {"pretrain val loss": out.val_loss}


SPEC = StageSpec(
    reads=(*PRETRAIN_READS, "variant.facts.pretrain", "protocol.pn_fraction"),
    trains=True,
    uses=("trainer", "data"),
    reported_as="pretrain",
    outputs=Outputs,
    columns=columns,
    figures=("figures.fig2", "figures_runs.fig4"),  # the learned p_n, the learning curves
    schedule="pretrain",
    bundle="train",
)  # fmt: skip


def schedule(cfg: DictConfig, pretrain: str) -> tuple[int, int]:
    """(steps, switch step) of a pretrain node of a variant whose facts say ``pretrain``: the
    full run, or for `short` protocol.pn_fraction of it (Sec. 2.1: 25k of the main run's 200k
    iterations); the switch point at protocol.switch_fraction of its steps."""
    steps = cfg.trainer.pretrain.max_steps
    if pretrain == "short":
        steps = max(1, round(cfg.protocol.pn_fraction * steps))
    return steps, max(1, round(cfg.protocol.switch_fraction * steps))


def cost(cfg: DictConfig, stage: str, inputs: list[str]) -> StageCost:
    """Its steps' tokens, from the corpus; last.ckpt with AdamW's moments (where it takes a
    step), model.pt and the switch point's weights."""
    steps, _ = schedule(cfg, cfg.variant.facts.pretrain)
    tokens = steps * cfg.trainer.pretrain.global_batch * cfg.data.seq_len
    disk = parameters(cfg) * (BYTES_TRAINING * (steps > 0) + 2 * BYTES_WEIGHTS)
    return training(cfg, tokens, disk, corpus=True)


def train_start(ctx: StageContext) -> TrainingPlan:
    """The plan this stage's node trains, solo (run) or in a seed bundle
    (ssmax.pipeline.bundle.train): the corpus, the schedule's steps, the switch point saved."""
    # lazy: ssmax.data.lm_module imports Lightning (~4 s on 2 cores); the pipeline process
    # imports every stage module (its SPEC and cost: plan) and stays without it
    from ssmax.data.lm_module import lm_datamodule

    cfg = ctx.cfg
    steps, switch_step = schedule(cfg, cfg.variant.facts.pretrain)
    length = Steps(steps, int(cfg.trainer.pretrain.warmup_steps))
    return node_plan(ctx, "pretrain", lm_datamodule, length, save_at=(switch_step,))


def run(ctx: StageContext) -> Outputs:
    return trained(ctx, train_start(ctx), seed_outputs)


def seed_outputs(plan: TrainingPlan, done: Trained) -> Outputs:
    """Its outputs once its plan trained (run, and a bundled seed: ssmax.pipeline.bundle.train):
    the training's, the switch point's files and step, the steps."""
    (switch_step,) = plan.save_at
    switch = plan.run_dir / f"model_step{switch_step}.pt"
    return Outputs(**fields_of(done), switch_point=str(switch),
                   switch_data=str(data_state_path(switch)), switch_step=switch_step,
                   steps=plan.length.total)  # fmt: skip
