"""Pretraining from scratch: the full run, or pipeline.pn_fraction of it for a variant whose
facts say `pretrain: short` (the p_n model of Sec. 2.1).

Every pretrain node also saves its weights at pipeline.switch_fraction of its steps (87.5%,
175k of 200k at paper scale), and where its data stood then, which switch(f) starts from.
"""

from __future__ import annotations

from typing import Any

from ssmax.stages.common import StageContext, train_cfg
from ssmax.stages.spec import PRETRAIN_READS, StageSpec

SPEC = StageSpec(
    reads=(*PRETRAIN_READS, "variant.facts.pretrain", "pipeline.pn_fraction"),
    trains=True,
    uses=("trainer", "data"),
)  # fmt: skip


def run(ctx: StageContext) -> dict[str, Any]:
    from ssmax.training import data_state_path, train

    cfg = train_cfg(ctx, "pretrain")
    steps = cfg.trainer.pretrain.max_steps
    if cfg.variant.facts.pretrain == "short":  # Sec. 2.1: 25k of the main run's 200k iterations
        steps = max(1, round(cfg.pipeline.pn_fraction * steps))
        cfg.trainer.pretrain.max_steps = steps
    switch_step = max(1, round(cfg.pipeline.switch_fraction * steps))
    cfg.trainer.save_weights_at = [switch_step]
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
