"""Every OmegaConf resolver of the project, registered in one place (register_resolvers).

`${ssmax_slurm:KEY}` in conf/hydra/launcher/ssmax_slurm.yaml: the SLURM profile's resource for
the stage of the run's objective (the multirun launcher of `python -m ssmax.train`).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from ssmax.config.compose import ConfigError
from ssmax.pipeline.slurm.cluster_profile import stage_resources


def launcher_value(key: str, _root_: DictConfig) -> Any:
    """`${ssmax_slurm:KEY}`: the profile's resource for the stage named as the run's objective
    (executor.stages.<objective>: its pretraining or SFT stage); the others, e.g.
    max_requeues, from the schema's executor defaults."""
    if _root_.executor.partition is None:
        raise ConfigError("hydra/launcher=ssmax_slurm needs a cluster profile: add "
                          "+executor/slurm/profile=<local|gpu8|...>")  # fmt: skip
    if key == "max_requeues":
        return int(_root_.executor.max_requeues)
    res = stage_resources(_root_, str(_root_.objective))
    if key == "gpus_per_node":
        return res[key] or None  # no --gpus-per-node=0 on GPU-less sites
    if key == "additional_parameters":
        return res[key] or {}
    return res[key]


def register_resolvers() -> None:
    """Idempotent: entry points call it before composing a config."""
    OmegaConf.register_new_resolver("ssmax_slurm", launcher_value, replace=True)
