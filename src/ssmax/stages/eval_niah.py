"""Needle in a haystack after SFT with theta x50 (Sec. 3.3, Fig. 6): accuracy per context
size (mean over depths) and the full (context x depth) grid; every answer in records.jsonl."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ssmax.data.tokenizer import load_tokenizer
from ssmax.evals.niah import accuracy_grid, run_niah
from ssmax.stages.common import StageContext, load_model
from ssmax.tracking import log_metrics


def run(ctx: StageContext) -> dict[str, Any]:
    cfg, spec = ctx.cfg, ctx.only_input()
    settings, train_len = cfg.eval.niah, cfg.data.seq_len
    model = load_model(cfg, spec["weights"], spec["rope_theta"])
    multiples = list(settings.context_multiples)
    records = run_niah(
        model, load_tokenizer(cfg.data), cfg.data, [m * train_len for m in multiples],
        list(settings.depths), settings.samples, seed=cfg.seed,
        answer_tokens=settings.max_new_tokens,
    )  # fmt: skip
    path = ctx.out_dir / "records.jsonl"
    path.write_text("".join(json.dumps(dataclasses.asdict(r)) + "\n" for r in records))
    out: dict[str, Any] = {"records": str(path), "context_multiples": multiples}
    for level in ("full", "first_digit"):
        _, depths, grid = accuracy_grid(records, level)
        key = "accuracy" if level == "full" else "first_digit_accuracy"
        out[key] = {str(m): row.mean().item() for m, row in zip(multiples, grid, strict=True)}
        out[f"{key}_grid"] = grid.tolist()
    out["depths"] = depths
    if ctx.run_id:
        log_metrics(cfg, ctx.run_id, {f"eval/niah_at_{k}x": v for k, v in out["accuracy"].items()})
    return out
