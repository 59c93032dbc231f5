"""The report: every node's results gathered per variant, mean and spread over seeds.

Writes report/report.md and report/results.json in the node's folder; the pipeline logs the
folder as artifacts of its MLflow run.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from typing import Any

from ssmax.pipeline.dag import ALL_VARIANTS
from ssmax.stages.common import StageContext


def gather(inputs: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """variant -> metric name -> one value per seed."""
    table: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for name, out in inputs.items():
        stage, variant, _ = name.split("/")
        row = table[variant]
        if stage in ("pretrain", "switch"):
            if out.get("val_loss") is not None:
                row["pretrain val loss"].append(out["val_loss"])
        elif stage == "eval_loss":
            for k, v in out["loss_at"].items():
                row[f"loss @{k}x"].append(v)
        elif stage == "eval_niah":
            for k, v in out["accuracy"].items():
                row[f"niah @{k}x"].append(v)
    return table


def fmt(values: list[float]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    return f"{mean:.3f}" if len(values) == 1 else f"{mean:.3f} ± {statistics.stdev(values):.3f}"


def markdown(table: dict[str, dict[str, list[float]]], seeds: list[int], preset: str) -> str:
    variants = [v for v in ALL_VARIANTS if v in table]
    columns = list(dict.fromkeys(c for v in variants for c in table[v]))
    lines = [
        f"# ssmax-repro report ({preset} preset)",
        "",
        f"Seeds: {seeds}; values are mean ± standard deviation over seeds. Losses past the "
        "training length and needle accuracy use RoPE theta x50; needle accuracy is after SFT.",
        "",
        "| variant | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for v in variants:
        lines.append(f"| {v} | " + " | ".join(fmt(table[v].get(c, [])) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def run(ctx: StageContext) -> dict[str, Any]:
    table = gather(ctx.inputs)
    folder = ctx.out_dir / "report"
    folder.mkdir(exist_ok=True)
    seeds = list(ctx.cfg.pipeline.seeds)
    report_md = folder / "report.md"
    report_md.write_text(markdown(table, seeds, ctx.cfg.preset.name))
    results = {v: dict(m) for v, m in table.items()}
    (folder / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True))
    return {"report_md": str(report_md), "results": results}
