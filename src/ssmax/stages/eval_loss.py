"""Per-position test loss past the training length with theta x50 (Sec. 3.2, Fig. 5), on the
pretrained (post-switch) model. Writes per_position_loss.csv; outputs the loss at multiples
of the training length."""

from __future__ import annotations

from typing import Any

from ssmax.data.lm import test_sequences
from ssmax.data.tokenizer import load_tokenizer
from ssmax.evals.per_position_loss import loss_at_multiples, per_position_loss
from ssmax.stages.common import StageContext, load_model
from ssmax.tracking import log_metrics


def run(ctx: StageContext) -> dict[str, Any]:
    cfg, spec = ctx.cfg, ctx.only_input()
    settings, train_len = cfg.eval.loss, cfg.data.seq_len
    model = load_model(cfg, spec["weights"], spec["rope_theta"])
    tokenizer = load_tokenizer(cfg.data)
    length = train_len * settings.max_multiple + 1  # + 1: the last position's target
    sequences = test_sequences(cfg.data, tokenizer, length, settings.sequences, seed=cfg.seed)
    losses = per_position_loss(model, sequences)
    csv = ctx.out_dir / "per_position_loss.csv"
    csv.write_text(
        "context,loss\n" + "".join(f"{i + 1},{v:.6f}\n" for i, v in enumerate(losses.tolist()))
    )
    at = loss_at_multiples(losses, train_len, list(settings.report_multiples))
    if ctx.run_id:
        log_metrics(cfg, ctx.run_id, {f"eval/loss_at_{k}x": v for k, v in at.items()})
    return {
        "loss_at": {str(k): v for k, v in at.items()},
        "csv": str(csv),
        "rope_theta": spec["rope_theta"],
    }
