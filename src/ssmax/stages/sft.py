"""Supervised fine-tuning on SQuAD 2.0 (or its generated stand-in), App. C hyperparameters."""

from __future__ import annotations

from typing import Any

from ssmax.stages.common import StageContext, train_cfg
from ssmax.stages.spec import StageSpec

SPEC = StageSpec(
    reads=("seed", "model", "variant", "data", "trainer.sft", "trainer.precision"),
    trains=True,
    uses=("trainer",),
)


def run(ctx: StageContext) -> dict[str, Any]:
    from ssmax.training import train

    cfg = train_cfg(ctx, "sft")
    cfg.init_from = ctx.only_input()["weights"]
    result = train(cfg)
    return {
        "weights": str(result.weights),
        "train_loss": result.metrics.get("train/loss"),
        "val_loss": result.metrics.get("val/loss"),
        "run_id": result.run_id,
    }
