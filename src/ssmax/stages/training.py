"""What a training stage (pretrain, switch, sft) does with its plan: trains its node by it and
says its outputs. Apart from stages/context.py, which every stage imports: this one reaches the
trainer, and a stage's fingerprint hashes the code its imports reach (pipeline/stage_code.py),
so the evals' nodes stay valid when the trainer changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ssmax.lit.plan import TrainingPlan
from ssmax.stages.context import StageContext
from ssmax.stages.outputs import Trained

T = TypeVar("T", bound=Trained)


def trained(
    ctx: StageContext, plan: TrainingPlan, outputs: Callable[[TrainingPlan, Trained], T]
) -> T:
    """A training stage's node trained by its plan, and its outputs: `outputs(plan, done)`, its
    stage's type from what every training writes (its weights, losses and MLflow run) and what
    the plan says (pretrain's switch point, the steps)."""
    # lazy: ssmax.lit imports Lightning (~4 s on 2 cores); the pipeline process imports every
    # stage module (its SPEC and cost: plan) and stays without it
    from ssmax.lit.trainer import train

    result = train(ctx.cfg, plan)
    done = Trained(weights=str(result.weights), train_loss=result.metrics.get("train/loss"),
                   val_loss=result.metrics.get("val/loss"), run_id=result.run_id)  # fmt: skip
    return outputs(plan, done)
