"""A run's life in MLflow: its params (the resolved config, flattened) and tags (what ran it:
variant, preset, seed, commit, machine), started as a pipeline's run or a node's child run,
tagged, ended; the folder's runs whose process is gone, closed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from ssmax.tracking.liveness import (
    close_dead_runs,
    closed_line,
    folder_tag,
    hand_to_job,
    process_tags,
)
from ssmax.tracking.manifest import git_commit, log_manifest, node_tags
from ssmax.tracking.store import ensure_experiment, mlflow_client, sqlite_file, tracking_uri

if TYPE_CHECKING:
    from ssmax.tracking.client import Client

# Volatile values: they change between a run and its resume, and MLflow refuses a changed
# param on an existing run. They go to tags or the YAML artifact instead.
VOLATILE_KEYS = ("paths", "init_from", "run_name", "tracking", "hydra")
MAX_PARAM_VALUE = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH (MLflow >= 2)


def flat_params(cfg: DictConfig) -> dict[str, str]:
    """The resolved config flattened to dotted keys, volatile keys left out, values cut."""
    tree = OmegaConf.to_container(cfg, resolve=True)
    flat: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            flat[prefix[:-1]] = str(node)[:MAX_PARAM_VALUE]

    walk({k: v for k, v in tree.items() if k not in VOLATILE_KEYS}, "")
    return flat


def source_tags() -> dict[str, str]:
    """The code a run ran: the commit, also as MLflow's own tag (the UI's "Source" version)."""
    commit = git_commit()
    return {"git_commit": commit, "mlflow.source.git.commit": commit, "mlflow.source.type": "LOCAL"}


def run_tags(cfg: DictConfig, here: bool = True) -> dict[str, str]:
    """A run's tags: its variant, preset, objective, seed and commit; and, for a run that runs
    in this process (here), the machine and packages it runs on (manifest.node_tags)."""
    tags = {
        "variant": str(cfg.variant.name),
        "preset": str(cfg.preset.name),
        "objective": str(cfg.objective),
        "seed": str(cfg.seed),
        **source_tags(),
        **process_tags(),  # the process that ends the run: a later start closes it if gone
        **folder_tag(cfg.paths.output_dir),
    }
    if here:
        tags |= node_tags()
    return tags


def log_config(client: Any, run_id: str, cfg: DictConfig, params: bool = True) -> None:
    """Params (100 per batch, MLflow's limit; params=False: none) and the full resolved YAML
    as an artifact."""
    from mlflow.entities import Param

    flat = [Param(k, v) for k, v in flat_params(cfg).items()] if params else []
    for i in range(0, len(flat), 100):
        client.log_batch(run_id, params=flat[i : i + 100])
    client.log_text(run_id, OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")


def _client(cfg: DictConfig) -> Client:
    return mlflow_client(tracking_uri(cfg))


def start_pipeline_run(cfg: DictConfig, name: str, tags: dict[str, str]) -> tuple[str, str]:
    """The parent run of one pipeline invocation and its experiment's id; its config is logged
    as for any run, and the manifest of what runs it (ssmax.tracking.manifest)."""
    experiment = ensure_experiment(cfg)
    client = _client(cfg)
    tags = source_tags() | process_tags() | folder_tag(cfg.paths.output_dir) | tags
    run = client.create_run(experiment, run_name=name, tags=tags)
    log_config(client, run.info.run_id, cfg)
    log_manifest(client, run.info.run_id)
    return run.info.run_id, experiment


def child_run(
    cfg: DictConfig,
    name: str,
    parent_run_id: str | None,
    tags: dict[str, str],
    log_params: bool = True,
    here: bool = True,
) -> str:
    """A run under the pipeline's run for a node that does not train (training nodes get
    theirs from the Lightning logger, with the same parent). Its resolved config is an
    artifact (config.yaml) whether or not its params are logged; here=False: a node that ran
    elsewhere (cached), whose machine and packages come in tags, not from this process."""
    experiment = ensure_experiment(cfg)
    client = _client(cfg)
    tags = run_tags(cfg, here) | dict(tags)  # the node's own tags win
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment, run_name=name, tags=tags)
    log_config(client, run.info.run_id, cfg, params=log_params)
    return run.info.run_id


def set_tags(cfg: DictConfig, run_id: str, tags: dict[str, str]) -> None:
    """Tags set on an existing run (of any status)."""
    client = _client(cfg)
    for key, value in tags.items():
        client.set_tag(run_id, key, value)


def finish_run(
    cfg: DictConfig, run_id: str, status: str, tags: dict[str, str] | None = None
) -> None:
    client = _client(cfg)
    for key, value in (tags or {}).items():
        client.set_tag(run_id, key, value)
    if client.get_run(run_id).info.status != status:
        client.set_terminated(run_id, status)


def log_artifacts(cfg: DictConfig, run_id: str, directory: Path) -> None:
    if directory.is_dir():
        _client(cfg).log_artifacts(run_id, str(directory))


def log_metrics(cfg: DictConfig, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    items = [Metric(k, float(v), now, step) for k, v in metrics.items()]
    _client(cfg).log_batch(run_id, metrics=items)


def close_dead(uri: str, output_dir: str | Path) -> str | None:
    """Close the folder's runs in uri left RUNNING by processes that are gone
    (ssmax.tracking.liveness); the line that names them, or None. A store not made yet: None."""
    db = sqlite_file(uri)
    if db is not None and not db.exists():
        return None
    return closed_line(close_dead_runs(mlflow_client(uri), output_dir))


def hand_run_to_job(cfg: DictConfig, run_id: str, job: str) -> None:
    """cfg's run run_id is ended by SLURM job `job` now (ssmax.tracking.liveness.hand_to_job)."""
    hand_to_job(_client(cfg), run_id, job)
