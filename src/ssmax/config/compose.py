"""The composed Hydra config: compose, and the checks on overrides and group choices made
before it. The checks on the composed settings are ssmax.preflight.settings; the model a config
describes is built by ssmax.model.factory.

Every problem is one line naming the key and what is allowed (ConfigError); entry points
print it and exit with status 2.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, OmegaConf

from ssmax.config.rules import moved, one_line
from ssmax.config.schema import TrainConfig
from ssmax.config.schema_pipeline import MOVED_KEYS, PipelineConfig

CONF_DIR = Path(__file__).resolve().parents[3] / "conf"
SCHEMAS = {"train": TrainConfig, "pipeline": PipelineConfig}


class ConfigError(ValueError):
    """A bad setting: the message is one line naming the key and the allowed values."""


def debug() -> bool:
    """SSMAX_DEBUG=1 (or Hydra's HYDRA_FULL_ERROR=1): the entry points re-raise errors they
    would print as one line, with the traceback."""
    return any(os.environ.get(k, "0") not in ("", "0") for k in ("SSMAX_DEBUG", "HYDRA_FULL_ERROR"))


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def store_schemas() -> None:
    """Register the schema (ssmax.config.schema) with Hydra's ConfigStore: the `schema` group that
    conf/config.yaml (train) and conf/pipeline.yaml (pipeline) merge first. Idempotent."""
    store = ConfigStore.instance()
    for name, node in SCHEMAS.items():
        store.store(group="schema", name=name, node=node, package="_global_")


store_schemas()  # before any compose: the entry points import this module first


def compose(*overrides: str, config_name: str = "config") -> DictConfig:
    """The composed config, as `python -m ssmax.train <overrides>` would see it (or the
    pipeline entry, with config_name="pipeline"). A value of the wrong type, or a key the
    schema lacks, raises ConfigError in one line."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        try:
            return hydra_compose(config_name, overrides=list(overrides))
        except Exception as err:  # Hydra's and OmegaConf's errors span several lines
            if isinstance(err, OverrideParseException):
                raise parse_error(err, overrides) from None
            message = one_line(err)
            if message is None:
                raise
            raise ConfigError(message) from None


def parse_error(err: Exception, args: Sequence[str]) -> ConfigError:
    """Hydra's multi-line grammar error as one line naming the override and what to do."""
    bad = next((a for a in args if not _parses(OverridesParser.create(), a)), "an override")
    return ConfigError(
        f"{bad!r} is not a valid override ({str(err).strip().splitlines()[0]}): quote a value "
        "holding = [ ] , or spaces, e.g. \"+pipeline.overrides.b_ssmax=['trainer.sft.lr=1e-4']\""
    )


def _parses(parser: object, arg: str) -> bool:
    try:
        parser.parse_overrides([arg])  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - any parse failure
        return False
    return True


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_cli_choices(argv: Sequence[str]) -> None:
    """Name an unknown config-group choice (variant=zzz, executor/slurm/profile=zzz) in one
    line, before Hydra's multi-line error. Sweeps (variant=a,b) are checked element by element."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key.startswith("hydra") or not (CONF_DIR / key).is_dir():
            continue  # hydra/...: Hydra's own groups (launchers, sweepers) lie outside conf/
        allowed = group_options(key)
        for choice in value.split(","):
            require(
                choice in allowed, f"{key}={choice!r} is unknown; allowed: {', '.join(allowed)}"
            )


# Blocks whose keys are open by design: per-variant overrides, MLflow tags, callbacks, the
# profile's per-stage resources and sbatch extras; and Hydra's own settings.
OPEN_KEYS = ("pipeline.overrides", "tracking.tags", "trainer.callbacks", "executor.stages",
             "executor.additional_parameters", "hydra")  # fmt: skip


def _leaves(node: object, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return []
    return [
        k for key, v in node.items() for k in [f"{prefix}{key}", *_leaves(v, f"{prefix}{key}.")]
    ]


def check_override_keys(argv: Sequence[str], config_name: str = "config") -> None:
    """An override (or +addition) of a key the config does not have, dotted or at the root,
    fails in one line naming the key and its nearest valid neighbours (trainer.pretrain.lrr=1
    -> lr; output_dir=x -> paths.output_dir), or the key it moved to (MOVED_KEYS), before any
    work. The config of reference is composed with the group choices of argv only."""
    pairs = [(a.lstrip("+~").partition("=")[0], a) for a in argv if "=" in a]
    is_group = lambda key: "/" in key or (CONF_DIR / key).is_dir()  # noqa: E731
    # every setting that is not a group choice: dotted keys and root ones (seed=1, output_dir=x)
    settings = [(k, a) for k, a in pairs if not is_group(k) and not k.startswith(OPEN_KEYS)]
    if not settings:
        return
    groups = [a.partition(",")[0] for k, a in pairs if is_group(k) and not a.startswith("-")]
    ref = OmegaConf.to_container(compose(*groups, config_name=config_name), resolve=False)
    keys = _leaves(ref)
    for key, arg in settings:
        if key in keys:
            continue
        if MOVED_KEYS.get(key) in keys:  # an earlier release's key: its new name
            raise ConfigError(f"{arg}: {moved(key, arg.partition('=')[2])}")
        parent = key.rpartition(".")[0]
        siblings = [k for k in keys if k.rpartition(".")[0] == parent] if parent in keys else keys
        near = difflib.get_close_matches(key, siblings, n=3, cutoff=0.6)
        while parent and parent not in keys:  # the deepest part of the key that is there
            parent = parent.rpartition(".")[0]
        under = [k.rpartition(".")[2] for k in keys if k.rpartition(".")[0] == parent]
        hint = f"nearest: {', '.join(near)}" if near else \
            f"keys under {parent or 'the root'}: {', '.join(under)}"  # fmt: skip
        raise ConfigError(f"{arg}: {key} is not a config key; {hint}")


def first_choices(argv: Sequence[str]) -> list[str]:
    """The overrides of argv with each sweep (a,b / choice(a,b) / range(3)) at its first value;
    Hydra's own settings (hydra.*, hydra/...) are left out."""
    out = []
    for arg in (a for a in argv if "=" in a and not a.lstrip("+~").startswith("hydra")):
        try:
            (override,) = OverridesParser.create().parse_overrides([arg])
        except OverrideParseException as err:
            raise parse_error(err, [arg]) from None
        if override.is_sweep_override():
            first = next(iter(override.sweep_string_iterator()), None)
            arg = arg if first is None else f"{override.get_key_element()}={first}"
        out.append(arg)
    return out


def absolute_paths(cfg: DictConfig) -> None:
    """Make paths.* absolute (from the current directory) so that subprocesses and cluster
    jobs started elsewhere write to the same place."""
    for key in ("output_dir", "cache_dir", "run_dir"):
        cfg.paths[key] = str(Path(cfg.paths[key]).expanduser().resolve())
