"""RoPE theta set to protocol.rope_factor (50) times its training value, no training
(Sec. 3.2, 3.3: 10,000 -> 500,000). The weights are the input's; the eval stages run them under
ssmax.evals.scaled_rope_theta with this factor (the one mechanism; the theta is recorded)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ssmax.evals.inference import scaled_theta
from ssmax.stages.costing import StageCost
from ssmax.stages.spec import StageSpec

if TYPE_CHECKING:  # annotations only: a stage's code is what it runs (pipeline.stage_code)
    from omegaconf import DictConfig

    from ssmax.stages.context import StageContext


@dataclass(frozen=True)
class Outputs:
    """The input's weights, and the factor and theta the evals run them at."""

    weights: str
    rope_factor: float
    rope_theta: float


SPEC = StageSpec(
    reads=("model.rope_theta", "protocol.rope_factor"),
    inline=True,
    outputs=Outputs,
)


def cost(cfg: DictConfig, stage: str, inputs: list[str]) -> StageCost:
    """Nothing: no compute, nothing written but its record."""
    return StageCost()  # bookkeeping: its outputs name the input's weights


def run(ctx: StageContext) -> Outputs:
    factor = float(ctx.cfg.protocol.rope_factor)
    return Outputs(weights=ctx.only_input().weights, rope_factor=factor,
                   rope_theta=scaled_theta(ctx.cfg.model.rope_theta, factor))  # fmt: skip
