"""Build the whole report from the report node's inputs: figures, tables, claims, md + html."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ssmax.config.variants import learns_p_n, with_starts
from ssmax.data.fact_spec import spec_from_cfg
from ssmax.report.declared import Declared
from ssmax.report.figures import make_figures
from ssmax.report.render import markdown, to_html
from ssmax.report.table import gather, rows
from ssmax.tracking.store import folder_store
from ssmax.verdicts.against import against
from ssmax.verdicts.claims import claims, in_scope
from ssmax.verdicts.design import design_rows, without_failed
from ssmax.verdicts.metrics import PN_R2
from ssmax.verdicts.pn_fit import pn_fits
from ssmax.verdicts.published_file import counts
from ssmax.verdicts.results import Design, Results, Settings, Table
from ssmax.verdicts.rivals import board_json, leaderboard, rival_claims
from ssmax.verdicts.text import primary_lines


def model_rows(inputs: dict[str, Any]) -> list[list[str]]:
    """One row per exported model (the export nodes'): its folder and registered version."""
    out = []
    for name, outputs in sorted(inputs.items()):
        stage, variant, seed = name.split("/")
        for source, folder in outputs.models.items() if stage == "export" else ():
            found = outputs.registered.get(source)
            version = "- (tracking off)"
            if found:
                named = "".join(f" = @{a}" for a in found.get("aliases", [])[1:])
                version = (f"{found['uri']}{named} "
                           f"(#/models/{found['name']}/versions/{found['version']})")  # fmt: skip
                if "@" in found["uri"]:  # offline: the node's own store numbered it
                    version = found["uri"]
            out.append([variant, seed.removeprefix("seed"), source, folder, version])
    return out


def settings_from_cfg(cfg: DictConfig) -> Settings:
    """The run's settings as the report shows them (and where Fig. 4 finds MLflow)."""
    uri = folder_store(cfg) if cfg.tracking.enabled else None
    details = {
        "variants": ", ".join(cfg.pipeline.variants),
        "model": f"{cfg.preset.model}: {cfg.model.n_layers} layers, "
        f"{cfg.model.n_heads} heads, dim {cfg.model.dim}",
        "pretraining steps": str(cfg.trainer.pretrain.max_steps),
        "RoPE theta at eval": f"{cfg.model.rope_theta:g} x {rope_factor(cfg)}",
    }
    details |= trained_on(cfg.data)
    bits = cpu_bits(cfg)
    if bits:
        details["CPU kernels"] = bits
    for name, block in cfg.eval.items():  # blocks (eval.niah) and plain values (sdpa_first)
        value = OmegaConf.to_container(block, resolve=True) if OmegaConf.is_config(block) else block
        details[f"eval.{name}"] = json.dumps(value)
    for key, paper in (cfg.preset.get("cuts") or {}).items():  # a reduced preset's cuts
        details[f"cut: {key}"] = f"{OmegaConf.select(cfg, key)} here; {paper}"
    design = cfg.preset.get("design")
    if design is not None:
        design = Design(tuple(design.seeds), float(design.niah_at_1x), float(design.falls_below))
    return Settings(str(cfg.preset.name), list(cfg.pipeline.seeds), int(cfg.data.seq_len), uri,
                    details, with_starts(list(cfg.pipeline.variants)), design)  # fmt: skip


def rope_factor(cfg: DictConfig) -> Any:
    """protocol.rope_factor; a node's config.yaml written before the protocol block had its own
    key (an older run's folder, rebuilt by `python -m ssmax.report`) has it under pipeline."""
    found = OmegaConf.select(cfg, "protocol.rope_factor")
    return found if found is not None else OmegaConf.select(cfg, "pipeline.rope_factor")


def cpu_bits(cfg: DictConfig) -> str | None:
    """For a run on CPUs: whether another machine gives the same numbers (trainer.cpu_isa);
    None on a GPU preset."""
    isa = cfg.trainer.get("cpu_isa")
    # a run from before preset.hardware (make report of an older folder): the CPU presets
    # were the ones that pinned the kernels
    hardware = cfg.preset.get("hardware", "cpu" if isa else "gpu")
    if hardware != "cpu" and cfg.trainer.accelerator != "cpu":
        return None
    if isa:
        return (f"pinned to {isa} (trainer.cpu_isa): the same numbers, bit for bit, whatever "
                f"kernels the CPU would pick, with these package versions; other versions give "
                f"other bits, as has every other machine so far, so a verdict near its "
                f"interval's edge may differ there")  # fmt: skip
    return (
        "this machine's own (trainer.cpu_isa unset): another CPU gives other low bits, so "
        "another training per seed; a verdict near its interval's edge may differ there"
    )


def trained_on(data: DictConfig) -> dict[str, str]:
    """The data the models saw, in words: pretraining (with planted facts) and SFT."""
    tokenizer = (
        f"GPT-2's BPE ({data.vocab_size:,} tokens)"
        if data.tokenizer == "gpt2"
        else f"a byte-level BPE of {data.vocab_size:,} tokens trained on the corpus"
    )
    if data.source == "embedded":
        pre = f"embedded corpus (Jane Austen's six novels), {tokenizer}"
    else:
        pre = f"SlimPajama ({data.hf_slimpajama}), {tokenizer}"
    spec = spec_from_cfg(data.facts)
    if spec.fraction > 0:
        fact, question = spec.templates[0]
        pre += (
            f"; planted facts in {spec.fraction:.0%} of the rows: {spec.facts_per_row} fact(s) "
            f"and {spec.questions_per_row} question(s) with answer per row, "
            f'{len(spec.templates)} templates (e.g. "{fact}" ... "{question} {{value}}"), '
            f"{len(spec.keys)} keys, values of {spec.digits[0]}-{spec.digits[1]} digits; the "
            "eval needle's words never appear in them"
        )
    sft = (
        "SQuAD 2.0, non-empty context/question/answer"
        if data.sft_source == "squad_v2"
        else f"generated SQuAD-2.0-format set ({data.sft_num_examples} items from the corpus)"
    )
    return {"pretraining data": pre, "SFT data": sft}


def add_pn_fits(table: Table, results: Results) -> None:
    """The rationale model's log-law R² per seed into the table (results.json): the p_n claim's
    metric, beside the others, so that a run's results.json holds every claim's values."""
    rationale = [v for v in results.variants("pretrain") if learns_p_n(v)][:1]
    for seed, (_, fit) in pn_fits(results).items():
        if not math.isnan(fit.r2):
            table.setdefault(rationale[0], {}).setdefault(PN_R2, {})[seed] = fit.r2


def build_report(
    inputs: dict[str, Any], settings: Settings, folder: Path, declared: Declared
) -> dict[str, Any]:
    """Write report.md, report.html, results.json, claims.json, against_published.json,
    leaderboard.json (a run with a rival law) and figN.png/.csv in folder. inputs: node (as
    reported: StageSpec.reported_as) -> its outputs; declared: what the stages feed the report
    (ssmax.stages.report.declared)."""
    folder.mkdir(parents=True, exist_ok=True)
    results = Results.from_inputs(inputs, settings)
    table = gather(inputs, declared.columns)
    figures = make_figures(results, folder, declared.figures)
    add_pn_fits(table, results)
    checked, untested = in_scope(claims(results), settings.variants)
    checked += rival_claims(results, settings.variants)  # none without a rival law
    board = leaderboard(results, settings.variants)
    md, page = folder / "report.md", folder / "report.html"
    models = model_rows(inputs)
    design = design_rows(results, settings.design, settings.variants) if settings.design else []
    if settings.design:  # the seeds where the skill did not form stay in; without, beside
        failed, without = without_failed(
            results, settings.variants or results.variants("eval_niah"),
            settings.design.falls_below, lambda r: in_scope(claims(r), settings.variants)[0],
        )  # fmt: skip
        if failed:
            design.append([f"the claims without seeds {failed}, where a variant did not form "
                           "the skill (information: they stay in every verdict)", "-", "-",
                           counts(without)])  # fmt: skip
    placed = against(table, settings.preset)  # this run's seeds against the published ones
    shown = (placed.line, placed.table())
    md.write_text(markdown(settings, rows(table), checked, figures, untested, models, design,
                           shown, board))  # fmt: skip
    page.write_text(to_html(settings, rows(table), checked, figures, untested, models, design,
                            shown, board))  # fmt: skip
    # variant -> metric -> seed -> value (seeds as JSON keys: text)
    (folder / "results.json").write_text(json.dumps(table, indent=2))
    claim_dicts = [dataclasses.asdict(c) for c in checked]  # adjusted p-values, flips, ...
    (folder / "claims.json").write_text(json.dumps(claim_dicts, indent=2))
    if board[0]:  # law -> measure -> its values and its differences to (a) and (b)
        (folder / "leaderboard.json").write_text(json.dumps(board_json(*board), indent=2))
    (folder / "against_published.json").write_text(json.dumps(placed.as_dict(), indent=2))
    return {
        "report_md": str(md),
        "report_html": str(page),
        "results": table,
        "claims": {c.key: c.verdict for c in checked},
        "primary_claims": primary_lines(checked),
        "figures": {f.key: str(f.png) if f.png else f"n/a: {f.missing}" for f in figures},
    }
