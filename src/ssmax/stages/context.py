"""What every stage gets (StageContext) and the few things several stages do."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from ssmax.host.devices import uses_cuda
from ssmax.lit.plan import DataModuleFor, Epochs, Steps, TrainingPlan
from ssmax.model import Transformer
from ssmax.model.factory import build_model
from ssmax.preflight.weights import read_weights


@dataclass
class StageContext:
    name: str  # the node, e.g. "sft/b_ssmax/seed0"
    stage: str
    cfg: DictConfig  # the node's resolved config (its variant, seed and overrides)
    out_dir: Path  # the node's own folder; everything it writes goes here
    inputs: dict[str, Any]  # upstream node name -> its outputs, its stage's type (SPEC.outputs)
    run_id: str | None = None  # MLflow run for stages that do not train (training makes its own)
    tags: dict[str, str] | None = None  # MLflow tags of the node's run (stage, node, fingerprint)
    fingerprints: dict[str, str] = field(default_factory=dict)  # upstream node -> its fingerprint
    input_dirs: dict[str, Path] = field(default_factory=dict)  # upstream node -> its folder
    input_modules: dict[str, str | None] = field(default_factory=dict)  # node -> its stage module

    def only_input(self) -> Any:
        (outputs,) = self.inputs.values()
        return outputs


def node_plan(
    ctx: StageContext, objective: str, data: DataModuleFor, length: Steps | Epochs, **start: Any
) -> TrainingPlan:
    """A training stage's plan for its node (ssmax.lit.plan): its folder, its MLflow name (the
    node's) and tags, with what the stage gives: its data, length and `start` (init_from,
    save_at, data_start)."""
    return TrainingPlan(objective=objective, data=data, length=length,
                        run_dir=Path(ctx.out_dir).expanduser().resolve(), run_name=ctx.name,
                        tags=dict(ctx.tags or {}), **start)  # fmt: skip


def eval_device(cfg: DictConfig) -> torch.device:
    """Where the evals run: trainer.accelerator (auto: the GPU when there is one). A GPU asked
    for and not there is an error, not a silent run on the CPU."""
    return torch.device("cuda" if uses_cuda(str(cfg.trainer.accelerator)) else "cpu")


def load_model(cfg: DictConfig, weights: str) -> Transformer:
    """The node's model with the given weights, in eval mode, at its training RoPE theta (the
    evals scale it with ssmax.evals.scaled_rope_theta), on the configured device (the evals
    move their batches there and use bf16 autocast on a GPU)."""
    model = build_model(cfg)
    model.load_state_dict(read_weights(weights, key="weights"))
    return model.to(eval_device(cfg)).eval()
