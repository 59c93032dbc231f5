"""Needle in a haystack after SFT with theta x50 (Sec. 3.3, Fig. 6): accuracy per context
size (mean over depths) and the full (context x depth) grid; every answer in records.jsonl.
Then the needle scores of Sec. 3.4 on the same model: Fig. 7's map (one fixed needle) in
needle_score_map.csv and Fig. 8's top score per trial in needle_trials.json. Last, the copy
probe (a diagnostic, not in the paper) on the same model."""

from __future__ import annotations

import dataclasses
import json
import statistics
from concurrent.futures import Executor
from typing import Any

from omegaconf import DictConfig

from ssmax.data.tokenizer import Tokenizer, load_tokenizer
from ssmax.evals.copying import copy_gain
from ssmax.evals.inference import scaled_rope_theta, sdpa_first
from ssmax.evals.needle_score import needle_score_map, top_needle_scores
from ssmax.evals.niah import NeedleRecord, accuracy_grid, model_builders, run_niah
from ssmax.model import Transformer
from ssmax.stages.context import StageContext, load_model
from ssmax.stages.costing import StageCost, forward
from ssmax.stages.spec import StageSpec
from ssmax.tracking.runs import log_metrics

SPEC = StageSpec(
    # eval.sdpa_first: attention differs by rounding, which can flip a greedy answer's tie
    reads=(
        "seed",
        "data",
        "eval.niah",
        "eval.needle_scores",
        "eval.copy_probe",
        "eval.sdpa_first",
    ),  # fmt: skip
    uses=("model", "variant", "trainer.accelerator"),  # the model: the input's fingerprint
    reported_as="eval_niah",
    bundle="evals",
)


def cost(cfg: DictConfig, stage: str, inputs: list[str]) -> StageCost:
    """Its forward passes: one per NIAH cell (depth x sample) at each context multiple with
    theta x50 and at each of eval.niah.base_theta_multiples with the training theta, and
    Fig. 7's map and Fig. 8's trials at the needle context. Decoding steps and the copy probe
    are left out."""
    seq, niah = cfg.data.seq_len, cfg.eval.niah
    cells = len(niah.depths) * int(niah.samples)
    multiples = [*niah.context_multiples, *(niah.base_theta_multiples or [])]
    passes = [(int(m * seq), cells) for m in multiples]
    if cfg.eval.get("needle_scores") is not None:
        passes.append((needle_context(cfg), 1 + cfg.eval.needle_scores.trials))
    return forward(cfg, passes, "niah")


def run(ctx: StageContext) -> dict[str, Any]:
    cfg, spec = ctx.cfg, ctx.only_input()
    model = load_model(cfg, spec["weights"])
    tokenizer = load_tokenizer(cfg.data)
    with sdpa_first(cfg.eval.sdpa_first), model_builders(model) as builders:  # one pool a node
        with scaled_rope_theta(model, spec["rope_factor"]):
            out, metrics = scaled_theta_evals(ctx, model, tokenizer, builders)
        base = list(cfg.eval.niah.base_theta_multiples or [])
        if base:  # the same test with the training theta: is the skill there before theta x50?
            accuracy = base_theta_niah(cfg, model, tokenizer, base, builders)
            out["base_theta_accuracy"] = accuracy
            metrics |= {f"eval/niah_base_theta_at_{k}x": v for k, v in accuracy.items()}
    if ctx.run_id:
        log_metrics(cfg, ctx.run_id, metrics)
    return out


def scaled_theta_evals(
    ctx: StageContext, model: Transformer, tokenizer: Tokenizer, builders: Executor
) -> tuple[dict[str, Any], dict[str, float]]:
    """NIAH, the needle scores and the copy probe, all with the model as it is (theta x50)."""
    cfg = ctx.cfg
    settings, train_len = cfg.eval.niah, cfg.data.seq_len
    multiples = list(settings.context_multiples)
    records = run_niah(
        model, tokenizer, cfg.data, [m * train_len for m in multiples],
        list(settings.depths), settings.samples, seed=cfg.seed,
        answer_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
        compile=settings.compile, builders=builders,
    )  # fmt: skip
    path = ctx.out_dir / "records.jsonl"
    path.write_text("".join(json.dumps(dataclasses.asdict(r)) + "\n" for r in records))
    out: dict[str, Any] = {"records": str(path), **niah_summary(records, train_len)}
    metrics = {f"eval/niah_at_{k}x": v for k, v in out["accuracy"].items()}
    if cfg.eval.needle_scores is not None:  # eval.needle_scores=null: off
        out["needle_scores"] = needle_score_outputs(ctx, model, tokenizer)
        summary = out["needle_scores"]
        metrics |= {f"eval/needle_{k}": summary[k] for k in ("map_max", "top_mean", "full")}
    if cfg.eval.copy_probe is not None:
        probe = cfg.eval.copy_probe
        out["copy"] = copy_gain(
            model, tokenizer.vocab_size, tokenizer.eos_id, int(probe.span), int(probe.count),
            seed=cfg.seed,
        )  # fmt: skip
        metrics["eval/copy_gain"] = out["copy"]["gain"]
    return out, metrics


def base_theta_niah(
    cfg: DictConfig, model: Transformer, tokenizer: Tokenizer, multiples: list,
    builders: Executor,
) -> dict[str, float]:  # fmt: skip
    """NIAH accuracy (mean over depths) at the given multiples with the training theta (the
    model as loaded, outside scaled_rope_theta)."""
    settings = cfg.eval.niah
    records = run_niah(
        model, tokenizer, cfg.data, [m * cfg.data.seq_len for m in multiples],
        list(settings.depths), settings.samples, seed=cfg.seed,
        answer_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
        compile=settings.compile, builders=builders,
    )  # fmt: skip
    return niah_summary(records, cfg.data.seq_len)["accuracy"]


def niah_summary(records: list[NeedleRecord], train_len: int) -> dict[str, Any]:
    """The records' accuracy per context multiple (mean over depths), full and first-digit,
    and both (multiple x depth) grids; rows in increasing context, each multiple named by its
    own records' context (whatever order the config listed the multiples in)."""
    out: dict[str, Any] = {}
    for level in ("full", "first_digit"):
        contexts, depths, grid = accuracy_grid(records, level)
        multiples = [c / train_len for c in contexts]
        multiples = [int(m) if m.is_integer() else m for m in multiples]
        key = "accuracy" if level == "full" else "first_digit_accuracy"
        out[key] = {str(m): row.mean().item() for m, row in zip(multiples, grid, strict=True)}
        out[f"{key}_grid"] = grid.tolist()
        out |= {"context_multiples": multiples, "depths": depths}
    return out


def needle_context(cfg: DictConfig) -> int:
    """Context of Figs. 7 and 8: context_multiple x the training length (paper: 8000)."""
    return round(float(cfg.eval.needle_scores.context_multiple) * cfg.data.seq_len)


def needle_score_outputs(
    ctx: StageContext, model: Transformer, tokenizer: Tokenizer
) -> dict[str, Any]:
    """Write Fig. 7's map and Fig. 8's trials in the node folder; return summary numbers."""
    cfg = ctx.cfg
    settings, context = cfg.eval.needle_scores, needle_context(cfg)
    scores = needle_score_map(
        model, tokenizer, cfg.data, context, float(settings.depth), str(settings.city),
        str(settings.number), seed=cfg.seed,
    )  # fmt: skip
    map_csv = ctx.out_dir / "needle_score_map.csv"
    map_csv.write_text(
        "layer,head,score\n"
        + "".join(
            f"{layer},{head},{value:.8g}\n"
            for layer, row in enumerate(scores.tolist())
            for head, value in enumerate(row)
        )
    )
    trials = top_needle_scores(
        model, tokenizer, cfg.data, context, int(settings.trials), seed=cfg.seed,
        answer_tokens=int(cfg.eval.niah.max_new_tokens),
    )  # fmt: skip
    trials_json = ctx.out_dir / "needle_trials.json"
    trials_json.write_text(json.dumps([dataclasses.asdict(t) for t in trials], indent=1))
    tops = [t.top_score for t in trials]
    outcomes = [t.score for t in trials]
    return {
        "context": context,
        "depth": float(settings.depth),  # Fig. 7's one needle
        "city": str(settings.city),
        "number": str(settings.number),
        "map_csv": str(map_csv),
        "trials_json": str(trials_json),
        "map_max": float(scores.max()),
        "trials": len(trials),
        "top_mean": statistics.fmean(tops) if tops else float("nan"),
        "top_median": statistics.median(tops) if tops else float("nan"),
        "full": outcomes.count("full") / max(1, len(outcomes)),
        "first_digit": outcomes.count("first_digit") / max(1, len(outcomes)),
    }
