"""One training run, assembled: the data, the LightningModule, the Trainer with its MLflow
logger, callbacks and plugins (build_logger, build_callbacks, build_trainer), then fit.
Resumable from the last checkpoint in its run folder. The command line is ssmax.train; the
pipeline's training stages call train() directly.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import hydra
import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError
from ssmax.data.lm_module import TokenizedDataModule
from ssmax.files.atomic import atomic_torch_save, atomic_write_json, atomic_write_text
from ssmax.host.compiling import compile_enabled
from ssmax.host.ranks import global_rank
from ssmax.lit.guards import resume_from
from ssmax.lit.lightning_module import LitLM
from ssmax.lit.plan import TrainingPlan, data_state_path
from ssmax.lit.progress import progress_bar
from ssmax.lit.resume import (
    AtomicCheckpointIO,
    ResumableMLFlowLogger,
    StepBoundary,
    active_deferral,
    end_status,
)
from ssmax.model.factory import build_model
from ssmax.preflight.weights import load_init
from ssmax.tracking.datasets import log_datasets
from ssmax.tracking.runs import log_config, run_tags
from ssmax.tracking.spool import DRAIN_WAIT_S, SPOOL_FILE, Spool
from ssmax.tracking.store import ensure_experiment, is_server, tracking_uri
from ssmax.tracking.system_metrics_callback import NodeSystemMetrics

RUN_ID_FILE = "mlflow_run_id"
WEIGHTS_FILE = "model.pt"


@dataclass
class TrainResult:
    weights: Path  # final weights (run_dir/model.pt)
    run_id: str | None  # the MLflow run
    metrics: dict[str, float]  # last logged values (train/loss, val/loss, ...)
    extra_weights: dict[int, Path]  # step -> weights saved mid-run (trainer.save_weights_at)


def precision(setting: str) -> str:
    if setting != "auto":
        return setting
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


def training_device(accelerator: str) -> str:
    """The device type the Trainer trains on for trainer.accelerator (auto: CUDA when present)."""
    if accelerator == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


def compiles(cfg: DictConfig) -> bool:
    """Whether the training loss runs under torch.compile (trainer.compile on this device)."""
    return compile_enabled(cfg.trainer.compile, training_device(cfg.trainer.accelerator))


def build_logger(cfg: DictConfig, run_dir: Path) -> ResumableMLFlowLogger:
    """An MLFlowLogger on the project's store for a run's recorded config (its plan in it:
    ssmax.lit.plan.TrainingPlan.recorded); reopens the run recorded in run_dir on resume.
    On a tracking server, metrics go through a spool in run_dir: training never waits for the
    server, nor stops when it is away (SpoolingMLFlowLogger); a local sqlite store is written
    directly (there is no server to lose)."""
    ensure_experiment(cfg)  # the store created under its lock (concurrent runs: ssmax.tracking)
    id_file = run_dir / RUN_ID_FILE
    run_id = id_file.read_text().strip() if id_file.exists() else None
    tags = run_tags(cfg) | dict(cfg.tracking.tags)
    if cfg.tracking.parent_run_id:  # a child of the pipeline's run
        tags["mlflow.parentRunId"] = cfg.tracking.parent_run_id
    uri = tracking_uri(cfg)
    end_wait = cfg.tracking.get("end_wait_s", DRAIN_WAIT_S)
    spooled = {"spool_dir": run_dir, "end_wait_s": end_wait} if is_server(uri) else {}
    logger = (SpoolingMLFlowLogger if spooled else ResumableMLFlowLogger)(
        experiment_name=cfg.tracking.experiment,
        tracking_uri=uri,
        run_name=cfg.run_name,  # the recorded config's (ssmax.lit.plan.TrainingPlan.recorded)
        tags=tags,
        run_id=run_id,
        **spooled,
    )
    if run_id is None:
        log_config(logger.experiment, logger.run_id, cfg)
        log_datasets(logger.experiment, logger.run_id, cfg)
        atomic_write_text(id_file, logger.run_id)
    return logger


def train(cfg: DictConfig, plan: TrainingPlan) -> TrainResult:
    """Fit the configured model as the plan says (ssmax.lit.plan: its data, length, start,
    save points, folder); the final weights land in plan.run_dir/model.pt. cfg is read, never
    written: the folder and the MLflow run record cfg with the plan in it (plan.recorded)."""
    L.seed_everything(cfg.seed, workers=True)
    stage = cfg.trainer[plan.objective]
    ranks = cfg.trainer.devices * cfg.trainer.num_nodes  # validated: the global batch divides
    accumulate = stage.global_batch // (stage.batch_size * ranks)
    datamodule = plan.data(cfg, stage.batch_size, compiles(cfg))
    total, warmup = prepared(datamodule, plan, accumulate * ranks, ranks)
    optim = OmegaConf.to_container(stage, resolve=True)
    lit = LitLM(build_model(cfg), plan.objective, optim, total, warmup, compile=compiles(cfg),
                loss_chunk=cfg.trainer.loss_chunk)  # fmt: skip
    start_weights(lit.model, cfg, plan)
    rank0 = global_rank() == 0  # only rank 0 writes the run folder and talks to MLflow
    logger = open_folder(plan.recorded(cfg), plan.run_dir, rank0)
    # every rank: each node's first samples it (collective start); rank 0 alone knows the run
    monitor = NodeSystemMetrics(cfg, plan.run_dir) if tracks_system(cfg) else None
    save_at = {step: plan.run_dir / f"model_step{step}.pt" for step in plan.save_at}
    with run_ends(logger, monitor, lit, plan.run_dir):
        callbacks = build_callbacks(cfg, plan.run_dir, save_at) + ([monitor] if monitor else [])
        trainer = build_trainer(cfg, plan, total, accumulate, logger, callbacks)
        metrics = fit(trainer, lit, datamodule, plan.run_dir, rank0)
    weights = plan.run_dir / WEIGHTS_FILE
    if rank0:
        atomic_torch_save(lit.model.state_dict(), weights)
    if torch.distributed.is_initialized():  # no collective follows; Lightning destroys NCCL's
        # group at exit but not gloo's, whose threads outliving the interpreter now and then
        # abort a rank ("terminate called without an active exception", pytorch#190489)
        torch.distributed.destroy_process_group()
    return TrainResult(weights, logger.run_id if logger else None, metrics, save_at)


def prepared(datamodule: TokenizedDataModule, plan: TrainingPlan, per_step: int,
             ranks: int) -> tuple[int, int]:  # fmt: skip
    """The data begun where the plan starts it and set up; (steps, warmup steps) of the plan's
    length (SFT's epochs counted in steps of this data). On one rank, data that packs into no
    batch says so in one line before the run folder is made (under DDP each rank's setup says
    it, inside fit)."""
    if plan.data_start is not None:
        datamodule.start_from(json.loads(Path(plan.data_start).read_text()))

    def batches_per_epoch() -> int:
        datamodule.setup("fit")
        return len(datamodule.train_dataloader())

    total, warmup = plan.length.count(batches_per_epoch, per_step)
    if ranks == 1:
        datamodule.prepare_data()
        datamodule.setup("fit" if total > 0 else "validate")
    return total, warmup


def start_weights(model: torch.nn.Module, cfg: DictConfig, plan: TrainingPlan) -> None:
    """The plan's init_from loaded into the model; a variant that starts from softmax weights
    ((e), (f)) without one is refused in one line."""
    if plan.init_from:
        load_init(model, cfg, plan.init_from)
    elif cfg.variant.s_init == "inv_mean_log_n":
        raise ConfigError(
            f"variant={cfg.variant.name} starts from softmax weights: set init_from=<path to "
            "(a)'s model.pt or .ckpt> (the pipeline wires this)"
        )


def open_folder(
    record: DictConfig, run_dir: Path, rank0: bool
) -> ResumableMLFlowLogger | Literal[False]:
    """Rank 0: the run folder made, its config.yaml (the recorded config) written and its MLflow
    run opened (tracking.enabled); the logger, or False."""
    if not rank0:
        return False
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(record, resolve=True))
    return build_logger(record, run_dir) if record.tracking.enabled else False


def fit(
    trainer: L.Trainer, lit: LitLM, datamodule: TokenizedDataModule, run_dir: Path, rank0: bool
) -> dict[str, float]:
    """Fit from the run folder's last checkpoint, then validate the final model (every run:
    (e) has no training at all); the last logged values."""
    fit_metrics = {}
    if trainer.max_steps > 0:
        last = resume_from(run_dir / "checkpoints" / "last.ckpt", rank0)
        trainer.fit(lit, datamodule=datamodule, ckpt_path=last)
        # validate() below replaces them; resumed at the final step, fit took none
        fit_metrics = lit.resumed_metrics | dict(trainer.callback_metrics)
    trainer.validate(lit, datamodule=datamodule, verbose=False)
    return {k: float(v) for k, v in (fit_metrics | trainer.callback_metrics).items()}


@contextmanager
def run_ends(
    logger: ResumableMLFlowLogger | Literal[False],
    monitor: NodeSystemMetrics | None,
    lit: LitLM,
    run_dir: Path,
) -> Iterator[None]:
    """How the run ends, whatever ends it: the system metrics' last sample, the spool drained; a
    failure marks the MLflow run FAILED (Lightning does so inside fit only); SIGTERM exits with
    128 + 15 after one line saying where the same command goes on from."""
    last = run_dir / "checkpoints" / "last.ckpt"
    try:
        yield
    except SIGTERMException:  # Lightning's: a SystemExit without a status, i.e. exit 0
        _stop(monitor)
        where = f"its last checkpoint ({last})" if last.exists() else "the start"
        print(f"stopped by SIGTERM at step {lit.global_step}; the same command goes on from "
              f"{where}", file=sys.stderr, flush=True)  # fmt: skip
        raise SystemExit(128 + signal.SIGTERM) from None
    except Exception:
        _stop(monitor)
        if logger:
            logger.finalize("failed")
            _drain(logger)
        raise
    except BaseException:  # a requeue's exit, Ctrl-C: the last sample before the process goes
        _stop(monitor)
        raise
    _stop(monitor)
    _drain(logger)


def tracks_system(cfg: DictConfig) -> bool:
    """Whether the run logs system metrics (tracking.system_metrics, with tracking on)."""
    return bool(cfg.tracking.enabled and cfg.tracking.get("system_metrics", True))


def _stop(monitor: NodeSystemMetrics | None) -> None:
    if monitor is not None:
        monitor.stop()


def _drain(logger: ResumableMLFlowLogger | bool) -> None:
    """A spooling logger's end: a bounded wait for the server, one line if it stays away."""
    if hasattr(logger, "drain"):
        logger.drain()


def build_callbacks(cfg: DictConfig, run_dir: Path, save_at: dict[int, Path]) -> list[L.Callback]:
    """Checkpoints for resuming; weights saved mid-run (trainer.save_weights_at); under a
    requeueing SLURM job, checkpoints at step boundaries; the progress bar; trainer.callbacks."""
    checkpoints = run_dir / "checkpoints"
    callbacks: list[L.Callback] = [
        L.pytorch.callbacks.ModelCheckpoint(
            dirpath=checkpoints,
            every_n_train_steps=cfg.trainer.checkpoint_every_n_steps,
            save_last=True,
            save_top_k=0,
        )
    ]
    if save_at:  # every rank: saving where the data stands is collective
        callbacks.append(SaveWeightsAt(save_at))
    deferred = active_deferral()  # a requeueing SLURM job: checkpoint at step boundaries
    if deferred is not None:
        callbacks.append(StepBoundary(deferred, checkpoints / "last.ckpt", run_dir))
    if cfg.trainer.progress_bar:
        callbacks.append(progress_bar(cfg.trainer.progress_every_s))
    return callbacks + [hydra.utils.instantiate(c) for c in cfg.trainer.callbacks]


def build_trainer(
    cfg: DictConfig,
    plan: TrainingPlan,
    total: int,
    accumulate: int,
    logger: ResumableMLFlowLogger | bool,
    callbacks: list[L.Callback],
) -> L.Trainer:
    """The Lightning Trainer of cfg.trainer for the plan's `total` optimizer steps."""
    t = cfg.trainer
    return L.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        precision=precision(t.precision),
        max_steps=total,
        max_epochs=-1,
        accumulate_grad_batches=accumulate,
        gradient_clip_val=t[plan.objective].grad_clip,
        val_check_interval=t.val_every_n_steps * accumulate,
        check_val_every_n_epoch=None,
        limit_val_batches=t.val_batches,
        log_every_n_steps=t.log_every_n_steps,
        logger=logger,
        callbacks=callbacks,
        plugins=plugins(),
        enable_progress_bar=t.progress_bar,
        enable_model_summary=False,
        deterministic=t.deterministic,
        default_root_dir=str(plan.run_dir),
        use_distributed_sampler=False,  # our samplers and streams shard by rank themselves
    )


def plugins() -> list[object]:
    """Atomic checkpoints; under SLURM, Lightning's cluster environment without its own
    auto-requeue: submitit's checkpointing (ssmax.pipeline.requeue) is the one owner of the
    requeue signal."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    found: list[object] = [AtomicCheckpointIO()]
    if SLURMEnvironment.detect():
        found.append(SLURMEnvironment(auto_requeue=False))
    return found


class SaveWeightsAt(L.Callback):
    """Saves the model's weights after the given optimizer steps (e.g. (a) at 87.5% for (f)),
    and where the data stood then (data_step<N>.json: batches taken per rank, the stream's
    positions), from which (f) continues. Runs on every rank; global rank 0 writes."""

    def __init__(self, paths: dict[int, Path]) -> None:
        self.paths = paths
        self._done: set[int] = set()

    def on_train_batch_end(self, trainer: L.Trainer, lit: L.LightningModule, *_: object) -> None:
        step = trainer.global_step
        if step not in self.paths or step in self._done:
            return  # (the micro-batches of the next step see the same global_step)
        self._done.add(step)
        datamodule = trainer.datamodule
        state = {"batches_done": datamodule.start_batches + lit.batches_seen}
        state |= datamodule.state_dict()  # collective under DDP: every rank calls it
        path = self.paths[step]
        if trainer.is_global_zero and not path.exists():
            atomic_write_json(data_state_path(path), state)
            atomic_torch_save(lit.model.state_dict(), path)


class SpoolingMLFlowLogger(ResumableMLFlowLogger):
    """A ResumableMLFlowLogger whose metrics and final status go through a Spool in the run
    folder (ssmax.tracking.spool). The run is created (or reopened) at start, when the server
    answers."""

    def __init__(self, *args: Any, spool_dir: str | Path, end_wait_s: float = DRAIN_WAIT_S,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(*args, **kwargs)
        self.end_wait_s = end_wait_s  # tracking.end_wait_s
        self.spool = Spool(Path(spool_dir) / SPOOL_FILE)
        self._status: str | None = None
        # Steps an earlier run of this folder left pending are on their way: logged already.
        # Its end status is not: the run is open again (RUNNING) and will end with its own.
        for record in self.spool.pending:
            record["superseded"] = "status" in record and record["run_id"] == self.run_id
            for key, _, _, step in record.get("metrics", ()):
                self._logged_through[key] = max(self._logged_through.get(key, -1), step)
        if self.spool.pending:
            self.spool.start()

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        metrics = self.unlogged(metrics, step)  # steps the run holds are dropped
        numbers = {k: v for k, v in metrics.items() if not isinstance(v, str)}
        self.spool.log_metrics(self._tracking_uri, self.run_id, numbers, step or 0)

    def log_system_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """System metrics (ssmax.tracking.system_metrics) through the spool, their own steps."""
        self.spool.log_metrics(self._tracking_uri, self.run_id, metrics, step)

    def finalize(self, status: str = "success") -> None:
        """The run's end status, queued behind its metrics (Lightning calls this after fit and
        again after validate: a repeated status is queued once)."""
        if not self._initialized:
            return
        status = end_status(status)  # a requeued run is KILLED
        status = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}.get(
            status, status
        )
        if status != self._status:
            self._status = status
            self.spool.append({"uri": self._tracking_uri, "run_id": self.run_id,
                               "status": status, "end_time": int(time.time() * 1000)})  # fmt: skip

    def drain(self) -> bool:
        """At the end of the run: wait up to tracking.end_wait_s for the server; one line when
        some is left (in the run folder, for the next run or `python -m ssmax.report`)."""
        return self.spool.drain(self.end_wait_s)
