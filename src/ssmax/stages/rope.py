"""RoPE theta set to pipeline.rope_factor (50) times its training value, no training
(Sec. 3.2, 3.3: 10,000 -> 500,000). The weights are the input's; only theta changes."""

from __future__ import annotations

from typing import Any

from ssmax.stages.common import StageContext
from ssmax.stages.spec import StageSpec

SPEC = StageSpec(reads=("model.rope_theta", "pipeline.rope_factor"), code=("stages/rope.py",))


def run(ctx: StageContext) -> dict[str, Any]:
    upstream = ctx.only_input()
    return {
        "weights": upstream["weights"],
        "rope_theta": float(ctx.cfg.model.rope_theta) * float(ctx.cfg.pipeline.rope_factor),
    }
