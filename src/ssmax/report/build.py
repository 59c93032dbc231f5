"""Build the whole report from the report node's inputs: figures, tables, claims, md + html."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ssmax.report.claims import claims
from ssmax.report.figures import make_figures
from ssmax.report.gather import Results, Settings
from ssmax.report.render import markdown, to_html
from ssmax.report.table import gather, rows


def settings_from_cfg(cfg: DictConfig) -> Settings:
    """The run's settings as the report shows them (and where Fig. 4 finds MLflow)."""
    from ssmax.tracking import tracking_uri

    uri = tracking_uri(cfg) if cfg.tracking.get("enabled", True) else None
    details = {
        "variants": ", ".join(cfg.pipeline.variants),
        "model": f"{cfg.preset.get('model', '?')}: {cfg.model.n_layers} layers, "
        f"{cfg.model.n_heads} heads, dim {cfg.model.dim}",
        "pretraining steps": str(cfg.trainer.pretrain.max_steps),
        "RoPE theta at eval": f"{cfg.model.rope_theta:g} x {cfg.pipeline.rope_factor}",
    }
    for name, block in cfg.get("eval", {}).items():
        details[f"eval.{name}"] = json.dumps(OmegaConf.to_container(block, resolve=True))
    return Settings(str(cfg.preset.name), list(cfg.pipeline.seeds), int(cfg.data.seq_len), uri,
                    details)  # fmt: skip


def build_report(
    inputs: dict[str, dict[str, Any]], settings: Settings, folder: Path
) -> dict[str, Any]:
    """Write report.md, report.html, results.json, claims.json and figN.png/.csv in folder."""
    folder.mkdir(parents=True, exist_ok=True)
    results = Results.from_inputs(inputs, settings)
    table = gather(inputs)
    figures = make_figures(results, folder)
    checked = claims(results)
    md, page = folder / "report.md", folder / "report.html"
    md.write_text(markdown(settings, rows(table), checked, figures))
    page.write_text(to_html(settings, rows(table), checked, figures))
    (folder / "results.json").write_text(json.dumps(table, indent=2, sort_keys=True))
    claim_dicts = [dataclasses.asdict(c) for c in checked]
    (folder / "claims.json").write_text(json.dumps(claim_dicts, indent=2))
    return {
        "report_md": str(md),
        "report_html": str(page),
        "results": table,
        "claims": {c.key: c.holds for c in checked},
        "figures": {f.key: str(f.png) if f.png else f"n/a: {f.missing}" for f in figures},
    }
