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
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import DictConfig

from ssmax.data.tokenizer import Tokenizer, load_tokenizer
from ssmax.evals.copying import copy_gain
from ssmax.evals.inference import scaled_rope_theta, sdpa_first
from ssmax.evals.needle_score import needle_score_map, top_needle_scores
from ssmax.evals.niah import NeedleRecord, accuracy_grid, model_builders, run_niah
from ssmax.model import Transformer
from ssmax.stages.context import StageContext, load_model
from ssmax.stages.costing import StageCost, forward
from ssmax.stages.outputs import by_multiple, omitted
from ssmax.stages.spec import StageSpec
from ssmax.tracking.runs import log_metrics


@dataclass(frozen=True)
class NeedleScores:
    """Figs. 7 and 8 (Sec. 3.4): where their files are, Fig. 7's one needle, summary numbers."""

    context: int
    depth: float
    city: str
    number: str
    map_csv: str
    trials_json: str
    map_max: float
    trials: int
    top_mean: float
    top_median: float
    full: float  # share of the trials answered with the full number
    first_digit: float


@dataclass(frozen=True)
class CopyProbe:
    """The copy probe's mean next-token loss (nats) in a span's first copy and its repeat."""

    first: float
    repeat: float
    gain: float


@dataclass(frozen=True)
class Outputs:
    """NIAH with theta x50: accuracy per context multiple (mean over depths; keys as text) and
    the (multiple x depth) grids, full number and first digit; every answer in `records`. The
    needle scores and the copy probe when on; the accuracy with the training theta at
    eval.niah.base_theta_multiples when set."""

    records: str
    accuracy: dict[str, float]
    accuracy_grid: list[list[float]]
    first_digit_accuracy: dict[str, float]
    first_digit_accuracy_grid: list[list[float]]
    context_multiples: list[float]
    depths: list[float]
    needle_scores: NeedleScores | None = omitted()
    copy: CopyProbe | None = omitted()
    base_theta_accuracy: dict[str, float] | None = omitted()

    def mean_accuracy(self, beyond: float | None) -> float | None:
        """Mean full-number accuracy over the grid's rows at multiples > beyond (None: all):
        the retrieval claims' metric past the training length (verdicts.metrics)."""
        grid, multiples = self.accuracy_grid, self.context_multiples
        if not grid or not multiples:
            return None
        rows = [r for m, r in zip(multiples, grid, strict=True) if beyond is None or m > beyond]
        return float(np.mean(rows)) if rows else None


def columns(out: Outputs) -> dict[str, float | None]:
    """Its cells of the results table."""
    needle, copy = out.needle_scores, out.copy
    return {
        **{f"niah @{k}x": v for k, v in by_multiple(out.accuracy)},
        **{f"niah @{k}x training theta": v for k, v in by_multiple(out.base_theta_accuracy or {})},
        "niah mean": float(np.mean(out.accuracy_grid)) if out.accuracy_grid else None,
        "niah past 1x": out.mean_accuracy(beyond=1),  # the retrieval claims' metric
        "needle top mean": needle.top_mean if needle else None,
        "copy gain": copy.gain if copy else None,
    }


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
    outputs=Outputs,
    columns=columns,
    # the accuracy grids, Fig. 7's map, Fig. 8's trials
    figures=("figures_runs.fig6", "figures_needle.fig7", "figures_needle.fig8"),
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


def run(ctx: StageContext) -> Outputs:
    cfg, spec = ctx.cfg, ctx.only_input()
    model = load_model(cfg, spec.weights)
    tokenizer = load_tokenizer(cfg.data)
    accuracy = None
    with sdpa_first(cfg.eval.sdpa_first), model_builders(model) as builders:  # one pool a node
        with scaled_rope_theta(model, spec.rope_factor):
            out, metrics = scaled_theta_evals(ctx, model, tokenizer, builders)
        base = list(cfg.eval.niah.base_theta_multiples or [])
        if base:  # the same test with the training theta: is the skill there before theta x50?
            accuracy = base_theta_niah(cfg, model, tokenizer, base, builders)
            metrics |= {f"eval/niah_base_theta_at_{k}x": v for k, v in accuracy.items()}
    if ctx.run_id:
        log_metrics(cfg, ctx.run_id, metrics)
    return dataclasses.replace(out, base_theta_accuracy=accuracy)


def scaled_theta_evals(
    ctx: StageContext, model: Transformer, tokenizer: Tokenizer, builders: Executor
) -> tuple[Outputs, dict[str, float]]:
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
    summary = niah_summary(records, train_len)
    metrics = {f"eval/niah_at_{k}x": v for k, v in summary["accuracy"].items()}
    needle, copy = None, None
    if cfg.eval.needle_scores is not None:  # eval.needle_scores=null: off
        needle = needle_score_outputs(ctx, model, tokenizer)
        metrics |= {"eval/needle_map_max": needle.map_max, "eval/needle_top_mean": needle.top_mean,
                    "eval/needle_full": needle.full}  # fmt: skip
    if cfg.eval.copy_probe is not None:
        probe = cfg.eval.copy_probe
        copy = CopyProbe(**copy_gain(
            model, tokenizer.vocab_size, tokenizer.eos_id, int(probe.span), int(probe.count),
            seed=cfg.seed,
        ))  # fmt: skip
        metrics["eval/copy_gain"] = copy.gain
    return Outputs(records=str(path), **summary, needle_scores=needle, copy=copy), metrics


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
) -> NeedleScores:
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
    return NeedleScores(
        context=context,
        depth=float(settings.depth),  # Fig. 7's one needle
        city=str(settings.city),
        number=str(settings.number),
        map_csv=str(map_csv),
        trials_json=str(trials_json),
        map_max=float(scores.max()),
        trials=len(trials),
        top_mean=statistics.fmean(tops) if tops else float("nan"),
        top_median=statistics.median(tops) if tops else float("nan"),
        full=outcomes.count("full") / max(1, len(outcomes)),
        first_digit=outcomes.count("first_digit") / max(1, len(outcomes)),
    )
