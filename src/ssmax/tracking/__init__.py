"""MLflow tracking: a sqlite store in the output folder, params from the resolved config."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Volatile values: they change between a run and its resume, and MLflow refuses a changed
# param on an existing run. They go to tags or the YAML artifact instead.
VOLATILE_KEYS = ("paths", "init_from", "run_name", "tracking", "hydra")
MAX_PARAM_VALUE = 6000  # mlflow.utils.validation.MAX_PARAM_VAL_LENGTH (MLflow >= 2)


def tracking_uri(cfg: DictConfig) -> str:
    if cfg.tracking.tracking_uri:
        return str(cfg.tracking.tracking_uri)
    return "sqlite:///" + str(Path(cfg.paths.output_dir).resolve() / "mlflow.db")


def artifact_location(cfg: DictConfig) -> str:
    root = cfg.tracking.artifact_location or Path(cfg.paths.output_dir) / "mlartifacts"
    return Path(root).resolve().as_uri()


def ensure_experiment(cfg: DictConfig) -> str:
    """Id of the configured experiment, created with an explicit artifact location."""
    from mlflow import MlflowClient

    Path(cfg.paths.output_dir).mkdir(parents=True, exist_ok=True)
    client = MlflowClient(tracking_uri(cfg))
    experiment = client.get_experiment_by_name(cfg.tracking.experiment)
    if experiment is not None:
        return experiment.experiment_id
    return client.create_experiment(cfg.tracking.experiment, artifact_location(cfg))


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


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


def run_tags(cfg: DictConfig) -> dict[str, str]:
    return {
        "variant": str(cfg.variant.name),
        "preset": str(cfg.preset.name),
        "objective": str(cfg.objective),
        "seed": str(cfg.seed),
        "git_commit": git_commit(),
    }


def log_config(client: Any, run_id: str, cfg: DictConfig) -> None:
    """Params (100 per batch, MLflow's limit) and the full resolved YAML as an artifact."""
    from mlflow.entities import Param

    params = [Param(k, v) for k, v in flat_params(cfg).items()]
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i : i + 100])
    client.log_text(run_id, OmegaConf.to_yaml(cfg, resolve=True), "config.yaml")
