"""Checks on the composed Hydra config, run before any work starts.

Every problem is one line naming the key and what is allowed (ConfigError); entry points
print it and exit with status 2.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssmax.model import ModelConfig, VariantConfig
from ssmax.schema import OBJECTIVES, PipelineConfig, TrainConfig

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
GPT2_VOCAB = 50257
SCHEMAS = {"train": TrainConfig, "pipeline": PipelineConfig}


class ConfigError(ValueError):
    """A bad setting: the message is one line naming the key and the allowed values."""


def debug() -> bool:
    """SSMAX_DEBUG=1 (or Hydra's HYDRA_FULL_ERROR=1): the entry points re-raise errors they
    would print as one line, with the traceback."""
    return any(os.environ.get(k, "0") not in ("", "0") for k in ("SSMAX_DEBUG", "HYDRA_FULL_ERROR"))


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def store_schemas() -> None:
    """Register the schema (ssmax.schema) with Hydra's ConfigStore: the `schema` group that
    conf/config.yaml (train) and conf/pipeline.yaml (pipeline) merge first. Idempotent."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, node in SCHEMAS.items():
        store.store(group="schema", name=name, node=node, package="_global_")


store_schemas()  # before any compose: the entry points import this module first


def compose(*overrides: str, config_name: str = "config") -> DictConfig:
    """The composed config, as `python -m ssmax.train <overrides>` would see it (or the
    pipeline entry, with config_name="pipeline"). A value of the wrong type, or a key the
    schema lacks, raises ConfigError in one line."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from ssmax.schema_rules import one_line

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        try:
            return hydra_compose(config_name, overrides=list(overrides))
        except Exception as err:  # Hydra's and OmegaConf's errors span several lines
            from hydra.errors import OverrideParseException

            if isinstance(err, OverrideParseException):
                raise parse_error(err, overrides) from None
            message = one_line(err)
            if message is None:
                raise
            raise ConfigError(message) from None


def parse_error(err: Exception, args: Sequence[str]) -> ConfigError:
    """Hydra's multi-line grammar error as one line naming the override and what to do."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

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
            _require(
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
    -> lr; output_dir=x -> paths.output_dir), before any work. The config of reference is
    composed with the group choices of argv only."""
    import difflib

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
        parent = key.rpartition(".")[0]
        siblings = [k for k in keys if k.rpartition(".")[0] == parent] if parent in keys else keys
        near = difflib.get_close_matches(key, siblings, n=3, cutoff=0.6)
        hint = (
            f"nearest: {', '.join(near)}"
            if near
            else f"keys under {parent or 'the root'}: "
            + ", ".join(k.rpartition(".")[2] for k in siblings[:12])
        )
        raise ConfigError(f"{arg}: {key} is not a config key; {hint}")


def first_choices(argv: Sequence[str]) -> list[str]:
    """The overrides of argv with each sweep (a,b / choice(a,b) / range(3)) at its first value;
    Hydra's own settings (hydra.*, hydra/...) are left out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

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


def check_compose(argv: Sequence[str], config_name: str = "config") -> DictConfig:
    """Compose and validate what argv asks for (a sweep: its first choices), so that a value of
    the wrong type or out of range fails in one line before any work or job starts."""
    cfg = compose(*first_choices(argv), config_name=config_name)
    validate(cfg)
    return cfg


def _check_batch(cfg: DictConfig, stage: str) -> None:
    s, t = cfg.trainer[stage], cfg.trainer
    per_update = s.batch_size * t.devices * t.num_nodes
    _require(
        s.global_batch % per_update == 0,
        f"trainer.{stage}.global_batch={s.global_batch} must be a multiple of batch_size x "
        f"devices x num_nodes = {s.batch_size} x {t.devices} x {t.num_nodes} = {per_update} "
        "(the rest is gradient accumulation)",
    )


def _check_facts(d: DictConfig) -> None:
    """data.facts (ssmax.data.fact_spec.check_spec's rules) and where facts can be planted."""
    from ssmax.data.fact_spec import spec_from_cfg

    try:
        spec = spec_from_cfg(d.facts)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    _require(
        spec.fraction == 0 or d.source == "embedded" or bool(d.shards_dir),
        f"data.facts.fraction={spec.fraction} plants facts in indexed rows (data.source=embedded "
        f"or data.shards_dir), not in the data.source={d.source} stream: set "
        "data.facts.fraction=0, or prepare shards (python -m ssmax.data.prepare)",
    )


def _check_path(v: DictConfig, accelerator: str) -> None:
    """variant.path against the law (ssmax.model.attention): SDPA runs the query factors only,
    FlexAttention normalises with softmax and has no backward on the CPU."""
    import torch

    from ssmax.model.laws import ADAPTIVE

    if v.normalizer != "softmax":
        _require(
            v.path in ("auto", "explicit"),
            f"variant.path={v.path!r} cannot run variant.normalizer={v.normalizer!r} (SDPA and "
            "FlexAttention normalise with softmax); allowed with it: 'auto', 'explicit'",
        )
    if v.score_law != "none" or v.scale in ADAPTIVE:
        law = f"variant.score_law={v.score_law!r}" if v.score_law != "none" else (
            f"variant.scale={v.scale!r}")  # fmt: skip
        _require(
            v.path != "sdpa",
            f"variant.path='sdpa' cannot run {law} (SDPA takes a factor on the query only); "
            "allowed with it: 'auto', 'explicit', 'flex'",
        )
    if v.path == "flex":
        _require(
            accelerator not in ("cpu", "auto") or torch.cuda.is_available(),
            f"variant.path='flex' trains on CUDA only (FlexAttention has no backward on the CPU)"
            f" and trainer.accelerator={accelerator} trains on the CPU here; allowed on the CPU: "
            "'auto', 'explicit', 'sdpa'",
        )


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError on the first bad setting: a field outside its schema rule (ranges,
    choices: ssmax.schema), then the rules between fields."""
    from ssmax.schema_rules import RuleError, check_rules

    try:
        check_rules(cfg)
    except RuleError as err:
        raise ConfigError(str(err)) from None
    if cfg.data.tokenizer == "gpt2":
        _require(
            cfg.data.vocab_size == GPT2_VOCAB,
            f"data.vocab_size={cfg.data.vocab_size} must be {GPT2_VOCAB} with data.tokenizer=gpt2",
        )
    _require(
        cfg.preset.model == cfg.model.name,
        f"model={cfg.model.name} does not match preset={cfg.preset.name}, which expects "
        f"model={cfg.preset.model}; drop the model override or pick another preset",
    )
    m = cfg.model
    _require(m.dim % m.n_heads == 0, f"model.dim={m.dim} must be divisible by model.n_heads")
    _require((m.dim // m.n_heads) % 2 == 0, "model.dim / model.n_heads must be even for RoPE")
    v = cfg.variant
    _require(
        not isinstance(v.s_init, str) or v.s_init == "inv_mean_log_n",
        f"variant.s_init={v.s_init!r}; allowed: a number or 'inv_mean_log_n'",
    )
    _check_path(v, cfg.trainer.accelerator)
    for stage in OBJECTIVES:
        _check_batch(cfg, stage)
    d = cfg.data
    _check_facts(d)
    _require(
        d.sft_context_words_min <= d.sft_context_words_max,
        f"data.sft_context_words_min={d.sft_context_words_min} must be <= "
        f"data.sft_context_words_max={d.sft_context_words_max}",
    )
    _require(
        d.val_fraction + d.test_fraction < 1,
        f"data.val_fraction + data.test_fraction = {d.val_fraction + d.test_fraction:g} must be "
        "< 1 (the rest is the training split)",
    )


def model_config(cfg: DictConfig) -> ModelConfig:
    return ModelConfig(**OmegaConf.to_container(cfg.model, resolve=True))


def variant_config(cfg: DictConfig) -> VariantConfig:
    model_part = OmegaConf.to_container(cfg.variant, resolve=True)
    model_part.pop("facts", None)  # the pipeline's and report's (ssmax.variants), not the model's
    return VariantConfig(**model_part)


def absolute_paths(cfg: DictConfig) -> None:
    """Make paths.* absolute (from the current directory) so that subprocesses and cluster
    jobs started elsewhere write to the same place."""
    for key in ("output_dir", "cache_dir", "run_dir"):
        cfg.paths[key] = str(Path(cfg.paths[key]).expanduser().resolve())
