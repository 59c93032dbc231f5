"""What one training run does, as a value: its data, its length and warmup, the weights it
starts from, the steps whose weights it saves, where its data begins, its folder and MLflow
names (TrainingPlan). The config says how to train (model, optimiser, precision, logging); the
plan says what this run is. A training stage (ssmax.stages.pretrain, switch, sft) builds one
from its config and inputs and never writes the config; the command line builds one from the
config alone (from_config). ssmax.lit.trainer.train runs one; a seed bundle
(ssmax.lit.bundle.run.BundleRun) runs one per seed, the plan its solo node would run.

No Lightning here: the pipeline's process imports the stages, and they import this.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from ssmax.data.lm_module import TokenizedDataModule

# (cfg, batch size a step, compiled loss) -> the run's datamodule: ssmax.data.lm_module's
# lm_datamodule or ssmax.data.sft_module's sft_datamodule, named by the stage that trains on it
# (a stage's code is what its imports reach, and pretraining's must not reach SFT's data: a
# change there would rerun every pretraining).
DataModuleFor = Callable[[DictConfig, int, bool], "TokenizedDataModule"]


def data_state_path(weights: Path) -> Path:
    """Where the data stood at a model_step<N>.pt a plan's save_at wrote: data_step<N>.json
    beside it (another plan's data_start)."""
    return weights.with_name(weights.stem.replace("model_step", "data_step") + ".json")


@dataclass(frozen=True)
class Steps:
    """A length in optimizer steps (pretraining, App. B)."""

    total: int
    warmup: int

    def count(self, batches_per_epoch: Callable[[], int], per_step: int) -> tuple[int, int]:
        """(steps, warmup steps)."""
        return self.total, self.warmup


@dataclass(frozen=True)
class Epochs:
    """A length in epochs of the run's data (SFT, App. C); warmup a fraction of epochs."""

    epochs: int
    warmup: float

    def count(self, batches_per_epoch: Callable[[], int], per_step: int) -> tuple[int, int]:
        """(steps, warmup steps): a step per per_step batches, an epoch's last step on the
        batches left (as Lightning steps at an epoch's end)."""
        per_epoch = math.ceil(batches_per_epoch() / per_step)
        return self.epochs * per_epoch, round(self.warmup * per_epoch)


@dataclass(frozen=True)
class TrainingPlan:
    objective: str  # "pretrain" or "sft": its loss and its trainer.<objective> block
    data: DataModuleFor  # the datamodule it trains on
    length: Steps | Epochs
    run_dir: Path  # its folder: checkpoints, model.pt, config.yaml, the MLflow run's id
    run_name: str  # its MLflow run's name
    init_from: str | None = None  # weights it starts from (a model.pt or .ckpt); None: fresh
    save_at: tuple[int, ...] = ()  # steps after which its weights and data position are saved
    data_start: str | None = None  # a data_step<N>.json: its data begins where that stood
    tags: Mapping[str, str] = field(default_factory=dict)  # its MLflow run's extra tags

    @classmethod
    def from_config(
        cls, cfg: DictConfig, data: DataModuleFor, data_start: str | Path | None = None
    ) -> TrainingPlan:
        """The plan a config says all of (`python -m ssmax.train`): cfg.objective, its trainer
        block's length, init_from, trainer.save_weights_at, paths.run_dir, run_name,
        tracking.tags; data_start as given."""
        block = cfg.trainer[cfg.objective]
        length = (
            Epochs(int(block.epochs), float(block.warmup_epochs))
            if cfg.objective == "sft"
            else Steps(int(block.max_steps), int(block.warmup_steps))
        )
        return cls(
            objective=cfg.objective,
            data=data,
            length=length,
            run_dir=Path(cfg.paths.run_dir).expanduser().resolve(),
            run_name=cfg.run_name or f"{cfg.variant.name}-{cfg.objective}-seed{cfg.seed}",
            init_from=cfg.init_from or None,
            save_at=tuple(int(s) for s in cfg.trainer.save_weights_at),
            data_start=None if data_start is None else str(data_start),
            tags=dict(cfg.tracking.tags),
        )

    def recorded(self, cfg: DictConfig) -> DictConfig:
        """The run's config as its folder (config.yaml) and its MLflow run record it: cfg,
        resolved, with this plan's values in their keys; a copy, cfg is not changed. Its
        from_config is this plan, so `python -m ssmax.train` of it trains this run again."""
        out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        out.objective = self.objective
        out.paths.run_dir = str(self.run_dir)
        out.run_name = self.run_name
        out.tracking.tags = dict(self.tags)
        block = out.trainer[self.objective]
        if isinstance(self.length, Steps):
            block.max_steps, block.warmup_steps = self.length.total, self.length.warmup
        else:
            block.epochs, block.warmup_epochs = self.length.epochs, self.length.warmup
        if self.init_from is not None or "init_from" in out:  # (a config of a stage's keys
            out.init_from = self.init_from  # only, pipeline.strict_reads, may have neither)
        if self.save_at or "save_weights_at" in out.trainer:
            out.trainer.save_weights_at = list(self.save_at)
        return out
