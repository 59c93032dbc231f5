"""What a stage declares about itself: the config keys it reads, whether it trains, and what the
engine (ssmax.pipeline, which names no stage: tests/test_engine_names.py) needs of it. The
pipeline derives a node's fingerprint from this and from the code the stage runs (found from its
imports: ssmax.pipeline.stage_code); with pipeline.strict_reads it hands the stage a config holding
only these keys, so that a read of an undeclared key fails instead of silently escaping the
fingerprint (tests/test_stage_reads.py).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# Read by every stage and never part of a result: where files go, MLflow, names.
COMMON_USES = ("paths", "tracking", "preset", "run_name", "objective", "init_from")
# Read by both pretraining stages (pretrain, switch): the model, its data and its schedule.
PRETRAIN_READS = ("seed", "model", "variant", "data:lm", "trainer.pretrain", "trainer.precision",
                  "protocol.switch_fraction")  # fmt: skip


@dataclass(frozen=True)
class StageSpec:
    """reads: dotted config keys that shape the result (fingerprinted; "data:lm" is the data
    block without its SFT keys). uses: keys read that do not (logging, devices) or that an
    input's fingerprint already covers (the model of a node that loads upstream weights).
    trains: it makes its own MLflow run and checkpoints (and resumes them). inline: bookkeeping
    of no compute at any scale; the local executor runs it in its own process (a worker process
    costs seconds to start). reported_as: the name the report reads this stage's outputs under
    (verdicts.results.Results: pretrain, eval_loss, eval_niah, export); None: the report does not
    read them. files: files of the repository the stage reads (relative to its root, under a
    folder ssmax.pipeline.snapshot copies), hashed by content into the fingerprint: a new
    published file makes the report again.

    outputs: the frozen dataclass its run returns, written into its done record and read back
    from it (ssmax.stages.outputs: to_record, read_outputs). For a reported stage, what it feeds
    the report: columns, its cells of the results table for one node's outputs (column name ->
    value, None: no cell; in the table's order), and figures, the figures drawn from its outputs
    (functions of ssmax.report, `module.function`, named here, not imported: their code is the
    report's, not in this stage's fingerprint).

    What the engine needs of it (none shapes a result, so none is fingerprinted):
    schedule: a training stage's trainer.<schedule> block (batch size, global batch, steps), the
    one a SLURM profile's devices must divide (ssmax.pipeline.slurm.cluster_profile).
    bundle: how executor.bundle groups its nodes' seeds: "train" (trained as one by
    ssmax.pipeline.bundle.train; the module has train_start(ctx), its node's TrainingPlan, and
    seed_outputs(plan, done), its outputs once trained: done, ssmax.stages.outputs.Trained),
    "evals" (evaluated one after another in one process: ssmax.pipeline.bundle.evals); None:
    each node runs alone. artifacts: folders of its node's folder logged as artifacts of the
    pipeline's MLflow run once it is done or cached. shows: the outputs the pipeline run prints
    at its end (`<stage>: <the first>`, then each line of the others: lists of lines).
    hosts_closer: under SLURM, the job that ends the pipeline's MLflow run takes this stage's
    resources (executor.stages.<stage>; no GPU, one task)."""

    reads: tuple[str, ...]
    trains: bool = False
    uses: tuple[str, ...] = ()
    inline: bool = False
    reported_as: str | None = None
    outputs: type[Any] | None = None
    columns: Callable[[Any], dict[str, float | None]] | None = None
    figures: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    schedule: str | None = None
    bundle: str | None = None
    artifacts: tuple[str, ...] = ()
    shows: tuple[str, ...] = ()
    hosts_closer: bool = False


def stage_module(module: str) -> ModuleType:
    """The stage module ssmax.stages.<module> (its SPEC, cost, run, ...)."""
    return importlib.import_module(f"ssmax.stages.{module}")


def stage_spec(module: str) -> StageSpec:
    """The SPEC a stage module declares (ssmax.stages.<module>)."""
    return stage_module(module).SPEC


def stage_modules() -> list[str]:
    """Every stage module of ssmax.stages (one with a SPEC; found by name, as pipelines name
    them), sorted: what the report gathers the stages' declarations from."""
    package = importlib.import_module("ssmax.stages")
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__))
    return [n for n in names if hasattr(stage_module(n), "SPEC")]
