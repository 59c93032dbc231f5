"""A variant started from another's pretrain output, named by its facts.start: (e) and (f) put
SSMax into (a)'s weights with s = 1 / mean log n (Sec. 3 (e), (f)).

(e) takes (a)'s final weights and does not train. (f) takes (a)'s weights at the switch point
and trains the remaining steps with a fresh LR warmup of protocol.switch_warmup_fraction of
them (the paper's 1,000 of 25,000: 4%, kept at every scale). Its optimizer state starts fresh:
s is a new parameter and the paper restarts the schedule, so (a)'s Adam moments are dropped
(a choice; the paper is silent). Its data continues (a)'s from the switch point: (f) trains on
what (a) would have trained on next (data_step<N>.json beside (a)'s switch-point weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ssmax.config.variants import facts
from ssmax.lit.plan import Steps, TrainingPlan
from ssmax.stages import pretrain
from ssmax.stages.context import StageContext, node_plan
from ssmax.stages.costing import BYTES_TRAINING, BYTES_WEIGHTS, StageCost, parameters, training
from ssmax.stages.outputs import Trained, fields_of
from ssmax.stages.pretrain import schedule
from ssmax.stages.spec import PRETRAIN_READS, StageSpec
from ssmax.stages.training import trained

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass(frozen=True, kw_only=True)
class Outputs(Trained):
    """Its weights and losses (Trained; (e)'s: validation only), and the steps it trained."""

    steps: int


SPEC = StageSpec(
    reads=(*PRETRAIN_READS, "variant.facts.start", "protocol.switch_warmup_fraction"),
    trains=True,
    uses=("trainer", "data"),
    # a variant's pretraining node is pretrain's or switch's: the report reads both as one
    reported_as="pretrain",
    outputs=Outputs,
    columns=pretrain.SPEC.columns,
    figures=pretrain.SPEC.figures,
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


def train_start(ctx: StageContext) -> TrainingPlan:
    """The plan this stage's node trains, solo (run) or in a seed bundle
    (ssmax.pipeline.bundle.train): the start variant's weights on the corpus, and from its switch
    point the remaining steps, a fresh warmup and its data position."""
    # lazy: ssmax.data.lm_module imports Lightning (~4 s on 2 cores); the pipeline process
    # imports every stage module (its SPEC and cost: plan) and stays without it
    from ssmax.data.lm_module import lm_datamodule

    softmax: pretrain.Outputs = ctx.only_input()
    checkpoint = ctx.cfg.variant.facts.start.checkpoint  # weights or switch_point (CHECKPOINTS)
    warmup = int(ctx.cfg.trainer.pretrain.warmup_steps)
    if checkpoint == "weights":  # the final weights: no training, validation loss only
        return node_plan(ctx, "pretrain", lm_datamodule, Steps(0, warmup),
                         init_from=softmax.weights)  # fmt: skip
    remaining = softmax.steps - softmax.switch_step  # the switch point: the steps left
    warmup = max(1, round(float(ctx.cfg.protocol.switch_warmup_fraction) * remaining))
    return node_plan(ctx, "pretrain", lm_datamodule, Steps(remaining, warmup),
                     init_from=softmax.switch_point, data_start=softmax.switch_data)  # fmt: skip


def run(ctx: StageContext) -> Outputs:
    return trained(ctx, train_start(ctx), seed_outputs)


def seed_outputs(plan: TrainingPlan, done: Trained) -> Outputs:
    """Its outputs once its plan trained (run, and a bundled seed: ssmax.pipeline.bundle.train):
    the training's and its steps."""
    return Outputs(**fields_of(done), steps=plan.length.total)
