"""Supervised fine-tuning on SQuAD 2.0 (or its generated stand-in), App. C hyperparameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ssmax.lit.plan import Epochs, TrainingPlan
from ssmax.stages.context import StageContext, node_plan
from ssmax.stages.costing import BYTES_TRAINING, BYTES_WEIGHTS, StageCost, parameters, training
from ssmax.stages.outputs import Trained, fields_of, omitted
from ssmax.stages.spec import StageSpec
from ssmax.stages.training import trained
from ssmax.tracking.runs import child_run

if TYPE_CHECKING:
    from omegaconf import DictConfig

SQUAD_FILTERED = 86_820  # Sec. 3.3: SQuAD 2.0 examples with context, question and answer


@dataclass(frozen=True, kw_only=True)
class Outputs(Trained):
    """Its weights and losses (Trained); inherited: the start variant's SFT model as it is
    (facts.inherit; no losses of its own)."""

    inherited: bool = omitted(False)


SPEC = StageSpec(
    reads=("seed", "model", "variant", "data", "trainer.sft", "trainer.precision"),
    trains=True,
    uses=("trainer",),
    outputs=Outputs,
    schedule="sft",
    bundle="train",
)


def examples(cfg: DictConfig) -> float:
    """Training examples of one epoch: SQuAD 2.0's filtered ones, or the generated stand-in's
    answerable share less its validation split."""
    if cfg.data.sft_source == "squad_v2":
        return SQUAD_FILTERED
    kept = 1 - float(cfg.data.sft_unanswerable_fraction)
    return cfg.data.sft_num_examples * kept * (1 - float(cfg.data.sft_val_fraction))


def cost(cfg: DictConfig, stage: str, inputs: list[str]) -> StageCost:
    """Every example of every epoch at the full sequence length (an upper bound: batches are
    cut after their longest example); last.ckpt with AdamW's moments and model.pt. Nothing
    where the variant inherits its start variant's SFT model."""
    if stage in cfg.variant.facts.inherit:
        return StageCost()
    tokens = cfg.trainer.sft.epochs * examples(cfg) * cfg.data.seq_len
    return training(cfg, tokens, parameters(cfg) * (BYTES_TRAINING + BYTES_WEIGHTS))


def train_start(ctx: StageContext) -> TrainingPlan:
    """The plan this stage's node trains, solo (run) or in a seed bundle
    (ssmax.pipeline.bundle.train): its own data, for its epochs, from the pretrained weights."""
    # lazy: ssmax.data.sft_module imports Lightning (~4 s on 2 cores); the pipeline process
    # imports every stage module (its SPEC and cost: plan) and stays without it
    from ssmax.data.sft_module import sft_datamodule

    block = ctx.cfg.trainer.sft
    length = Epochs(int(block.epochs), float(block.warmup_epochs))
    return node_plan(ctx, "sft", sft_datamodule, length, init_from=ctx.only_input().weights)


def run(ctx: StageContext) -> Outputs:
    if ctx.stage in ctx.cfg.variant.facts.inherit:
        return inherited(ctx)
    return trained(ctx, train_start(ctx), seed_outputs)


def inherited(ctx: StageContext) -> Outputs:
    """The start variant's SFT model as it is (facts.inherit), in an MLflow run of this node's
    own: the pipeline's run tree holds every node, and the export registers the model from it."""
    run_id = None
    if ctx.cfg.tracking.enabled:
        run_id = child_run(ctx.cfg, ctx.name, ctx.cfg.tracking.parent_run_id, dict(ctx.tags or {}))
    return Outputs(weights=ctx.only_input().weights, inherited=True, run_id=run_id)


def seed_outputs(plan: TrainingPlan, done: Trained) -> Outputs:
    """Its outputs once its plan trained (run, and a bundled seed: ssmax.pipeline.bundle.train):
    the training's."""
    return Outputs(**fields_of(done))
