"""Train one variant: `python -m ssmax.train [preset=tiny] [variant=b_ssmax] [objective=sft]`.

The command line only: check the overrides and the files they name (one line and exit 2 on a
bad one, before any work; SSMAX_DEBUG=1 shows the traceback),
then train the composed config with the plan it says (train_config: ssmax.lit.trainer.train,
which assembles the data, the model, the Lightning Trainer, its logger and callbacks, and
fits). Prints the resolved config with `--cfg job`; `-m` sweeps (hydra/launcher=ssmax_slurm:
one SLURM job per run).
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import hydra
from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError, absolute_paths, check_cli_choices, debug
from ssmax.data.hub import DataUnavailableError
from ssmax.host.devices import uses_cuda
from ssmax.host.logs import quiet_lightning_tips
from ssmax.lit.plan import DataModuleFor, TrainingPlan
from ssmax.pipeline.slurm.launcher import launcher_value, register_resolvers
from ssmax.preflight.input_files import check_inputs
from ssmax.preflight.overrides import keys_named_first
from ssmax.preflight.settings import check_compose, validate
from ssmax.tracking.reach import check_tracking

if TYPE_CHECKING:  # training imports Lightning: only when it trains
    from ssmax.lit.trainer import TrainResult

# Lightning (~4 s to import on 2 cores: ssmax.lit, the datamodules) is imported inside the
# functions that train, so that --help, --cfg job and a bad override answer without it

# conf/hydra/launcher/ssmax_slurm.yaml reads the cluster profile through it.
register_resolvers()


def _requeueable() -> AbstractContextManager[object]:
    """In a job of hydra/launcher=ssmax_slurm, submitit's USR2 handler (checkpoint, requeue)
    waits for the end of the optimizer step, like a pipeline node's (ssmax.pipeline.requeue)."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return nullcontext()
    from submitit.core.job_environment import JobEnvironment

    from ssmax.lit.resume import DeferredSignal  # lazy: Lightning, only to train

    return DeferredSignal(JobEnvironment._usr_sig())


def fail(err: BaseException, status: int) -> NoReturn:
    """One line on stderr and exit (SSMAX_DEBUG=1: the traceback instead)."""
    if debug():
        raise err
    print(f"error: {err}", file=sys.stderr)
    sys.exit(status)


def _log_once() -> None:
    """Hydra's logging prints every record (console and the job's log file); Lightning gives its
    loggers a console handler of their own when imported before it, so each line would print
    twice."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True


def _datamodule_for(cfg: DictConfig) -> DataModuleFor:
    """The objective's datamodule (the pipeline's stages each import only their own)."""
    if cfg.objective == "sft":
        from ssmax.data.sft_module import sft_datamodule  # lazy: Lightning, only to train

        return sft_datamodule
    from ssmax.data.lm_module import lm_datamodule  # lazy: Lightning, only to train

    return lm_datamodule


def inference_only_line(cfg: DictConfig) -> str | None:
    """What a run of an inference-only variant trains: one whose facts say it starts from
    another variant's weights and takes that variant's chain stages as they are (facts.start,
    facts.inherit: (g), (m), (m2), (m3), (p), (k2)). Its law is 1 at every position up to
    data.seq_len (max(1, ...) of n / N), all that training sees, so training under it trains the
    start variant's weights; the pipeline never trains it. Not refused: the weights are what the
    variant evaluates. A normaliser in place of softmax ((p)) is no length law: it acts at every
    position, and the line says that training under it trains weights the pipeline never
    trains. A variant of no length law and softmax ((k2): (k) with its RoPE as trained at the
    evals) trains as its start does. None for any other variant."""
    facts = cfg.variant.facts
    if not facts.start or not facts.inherit:
        return None
    name, start = cfg.variant.name, facts.start["variant"]
    if cfg.variant.scale == "none" and cfg.variant.normalizer != "softmax":
        # (p): a normaliser, not a length law: it acts at every n
        return (
            f"variant={name} is inference-only: the pipeline evaluates {start}'s own weights "
            f"under its law (conf/variant/{name}.yaml); its law (variant.normalizer="
            f"{cfg.variant.normalizer}) is no length law and acts at every position, so this run "
            "trains weights under it, which the pipeline never does"
        )
    if cfg.variant.scale == "none":  # no length law: it differs from its start at the evals
        return (
            f"variant={name} trains as {start} does: it differs from it only at evaluation "
            f"(facts.start, facts.inherit), so the pipeline evaluates {start}'s own weights "
            f"(conf/variant/{name}.yaml)"
        )
    return (
        f"variant={name} is inference-only: its law (variant.scale={cfg.variant.scale}) is 1 at "
        f"every position up to data.seq_len={cfg.data.seq_len}, so this run trains softmax "
        f"weights, as {start} does; the law applies only at evaluation, past data.seq_len (the "
        f"pipeline evaluates {start}'s own weights under it: conf/variant/{name}.yaml)"
    )


def train_config(cfg: DictConfig, data_start: str | Path | None = None) -> TrainResult:
    """Train cfg as the command line does: its plan all from the config
    (ssmax.lit.plan.TrainingPlan.from_config), on its objective's data; data_start: a
    data_step<N>.json to begin the data at (another run's save point)."""
    from ssmax.lit.trainer import train  # lazy: Lightning, only to train

    return train(cfg, TrainingPlan.from_config(cfg, _datamodule_for(cfg), data_start))


@hydra.main(config_path="../../conf", config_name="config", version_base="1.3")
def _hydra_main(cfg: DictConfig) -> None:
    from ssmax.lit.guards import TrainingDiverged  # lazy: Lightning, only to train

    _log_once()
    quiet_lightning_tips()
    absolute_paths(cfg)  # this job's own config: jobs started elsewhere write the same place
    note = inference_only_line(cfg)
    if note:
        logging.getLogger(__name__).warning(note)
    try:
        with _requeueable():
            validate(cfg)  # a sweep's job: its own settings (main checked the first's)
            result = train_config(cfg)
    except (ConfigError, DataUnavailableError) as err:  # bad input: status 2
        fail(err, 2)
    except TrainingDiverged as err:  # the run stopped: status 1
        fail(err, 1)
    print(f"weights: {result.weights}")


def check_launcher(argv: list[str]) -> None:
    """hydra/launcher=ssmax_slurm reads its resources from a cluster profile: say so in one line
    before Hydra fails on the interpolation with a page of its own."""
    if "hydra/launcher=ssmax_slurm" in argv and not any(
        a.lstrip("+").startswith("executor/slurm/profile=") for a in argv
    ):
        launcher_value("partition", OmegaConf.create({"executor": {"partition": None}}))  # raises


def main() -> None:
    try:
        check_cli_choices(sys.argv[1:])
        overrides = [a for a in sys.argv[1:] if a != "-m" and not a.startswith("--")]
        with keys_named_first(overrides, "config"):  # a misspelled key: its nearest neighbours
            cfg = check_compose(overrides)
        check_launcher(sys.argv[1:])
        check_inputs(cfg, sft=cfg.objective == "sft", pretrain=cfg.objective == "pretrain")
        if "hydra/launcher=ssmax_slurm" not in sys.argv[1:]:  # else it trains on a SLURM node
            uses_cuda(str(cfg.trainer.accelerator))
        check_tracking(cfg)  # a tracking server that does not answer: one line, in seconds
    except ConfigError as err:
        fail(err, 2)
    _hydra_main()


if __name__ == "__main__":
    main()
