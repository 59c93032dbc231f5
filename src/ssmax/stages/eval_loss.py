"""Per-position test loss past the training length with theta x50 (Sec. 3.2, Fig. 5), on the
pretrained (post-switch) model. Writes per_position_loss.csv (prose of the test split) and,
when data.facts is on, per_position_loss_facts.csv (the same prose with facts planted at the
training density, questions up to the whole length past their facts); outputs the loss at
multiples of the training length, and the loss at 1x with the training theta (the Sec. 3.2
claim that theta x50 alone hurts (a) at short context)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ssmax.data.fact_spec import spec_from_cfg
from ssmax.data.lm import iter_test_sequences, test_fact_sequences
from ssmax.data.tokenizer import load_tokenizer
from ssmax.evals.inference import model_device, prefetch, scaled_rope_theta, sdpa_first
from ssmax.evals.per_position_loss import loss_at_multiples, per_position_loss
from ssmax.host.compiling import compile_enabled
from ssmax.stages.context import StageContext, load_model
from ssmax.stages.costing import StageCost, forward
from ssmax.stages.outputs import by_multiple, omitted
from ssmax.stages.spec import StageSpec
from ssmax.tracking.runs import log_metrics

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass(frozen=True)
class Outputs:
    """The loss at each report multiple ("1", "2", ...: text, as JSON keys are) with theta x50,
    its per-position CSV, the theta; the loss at 1x with the training theta (None: a record
    from before 2026-11-23); with planted facts (data.facts), the same on them."""

    loss_at: dict[str, float]
    csv: str
    rope_theta: float
    base_theta_loss_at_1x: float | None = None
    facts_loss_at: dict[str, float] | None = omitted()
    facts_csv: str | None = omitted()


def columns(out: Outputs) -> dict[str, float | None]:
    """Its cells of the results table."""
    return {
        **{f"loss @{k}x": v for k, v in by_multiple(out.loss_at)},
        "loss @1x training theta": out.base_theta_loss_at_1x,
        **{f"facts loss @{k}x": v for k, v in by_multiple(out.facts_loss_at or {})},
    }


SPEC = StageSpec(
    reads=("seed", "data:lm", "eval.loss"),
    # the model: the input's fingerprint; compile and batching change no number beyond rounding
    uses=("model", "variant", "data", "trainer.accelerator", "trainer.compile", "eval.sdpa_first"),
    reported_as="eval_loss",
    outputs=Outputs,
    columns=columns,
    figures=("figures_runs.fig5",),
    bundle="evals",
)


def longest(cfg: DictConfig) -> int:
    """Tokens of a test row: eval.loss.max_multiple x the training length, + 1 for the last
    position's target."""
    return round(cfg.data.seq_len * cfg.eval.loss.max_multiple) + 1


def cost(cfg: DictConfig, stage: str, inputs: list[str]) -> StageCost:
    """Its forward passes: the prose (and the planted facts, if on) at the longest length, then
    the first 1x at the training theta."""
    count, planted = int(cfg.eval.loss.sequences), spec_from_cfg(cfg.data.facts).fraction > 0
    passes = [(longest(cfg), count)] * (1 + planted) + [(cfg.data.seq_len + 1, count)]
    return forward(cfg, passes, "eval_loss")


def write_csv(path: Path, losses: torch.Tensor) -> str:
    path.write_text(
        "context,loss\n" + "".join(f"{i + 1},{v:.6f}\n" for i, v in enumerate(losses.tolist()))
    )
    return str(path)


def run(ctx: StageContext) -> Outputs:
    cfg, spec = ctx.cfg, ctx.only_input()
    settings, train_len = cfg.eval.loss, cfg.data.seq_len
    multiples = list(settings.report_multiples)
    model = load_model(cfg, spec.weights)
    tokenizer = load_tokenizer(cfg.data)
    length = longest(cfg)
    count = int(settings.sequences)

    def sequences(cut: int = length) -> Iterator[torch.Tensor]:
        """The test rows, streamed (tokenized ahead of the GPU), each cut to ``cut`` tokens."""
        rows = iter_test_sequences(cfg.data, tokenizer, length, seed=cfg.seed)
        return prefetch(row[:cut] for row in itertools.islice(rows, count))

    compiled = compile_enabled(cfg.trainer.compile, model_device(model))

    def loss(rows: Iterable[torch.Tensor]) -> torch.Tensor:
        with sdpa_first(cfg.eval.sdpa_first):
            return per_position_loss(model, rows, batch_size=settings.batch_size, compile=compiled)

    planted = None
    if spec_from_cfg(cfg.data.facts).fraction > 0:
        planted = test_fact_sequences(cfg.data, tokenizer, length, count, seed=cfg.seed)
    with scaled_rope_theta(model, spec.rope_factor):
        losses = loss(sequences())
        fact_losses = loss(planted) if planted is not None else None
    at = loss_at_multiples(losses, train_len, multiples)
    csv = write_csv(ctx.out_dir / "per_position_loss.csv", losses)
    metrics = {f"eval/loss_at_{k}x": v for k, v in at.items()}
    # The same first N positions with the training theta: what theta x50 alone costs at 1x.
    base = metrics["eval/base_theta_loss_at_1x"] = loss(sequences(train_len + 1)).mean().item()
    facts_at, facts_csv = None, None
    if fact_losses is not None:
        fact_at = loss_at_multiples(fact_losses, train_len, multiples)
        facts_at = {str(k): v for k, v in fact_at.items()}
        facts_csv = write_csv(ctx.out_dir / "per_position_loss_facts.csv", fact_losses)
        metrics |= {f"eval/facts_loss_at_{k}x": v for k, v in fact_at.items()}
    if ctx.run_id:
        log_metrics(cfg, ctx.run_id, metrics)
    return Outputs(loss_at={str(k): v for k, v in at.items()}, csv=csv,
                   rope_theta=spec.rope_theta, base_theta_loss_at_1x=base,
                   facts_loss_at=facts_at, facts_csv=facts_csv)  # fmt: skip
