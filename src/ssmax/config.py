"""Checks on the composed Hydra config, run before any work starts.

Every problem is one line naming the key and what is allowed (ConfigError); entry points
print it and exit with status 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ssmax.model import ModelConfig, VariantConfig
from ssmax.model.attention import SCALES

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
OBJECTIVES = ("pretrain", "sft")
SCHEDULES = ("constant", "cosine")
TOKENIZERS = ("bpe", "gpt2")
GPT2_VOCAB = 50257


class ConfigError(ValueError):
    """A bad setting: the message is one line naming the key and the allowed values."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def compose(*overrides: str, config_name: str = "config") -> DictConfig:
    """The composed config, as `python -m ssmax.train <overrides>` would see it (or the
    pipeline entry, with config_name="pipeline")."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name, overrides=list(overrides))


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def check_cli_choices(argv: Sequence[str]) -> None:
    """Name an unknown config-group choice (variant=zzz) in one line, before Hydra's
    multi-line error. Sweeps (variant=a,b) are checked element by element."""
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or "/" in key or not (CONF_DIR / key).is_dir():
            continue
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
    """A dotted override (or +addition) of a key the config does not have fails in one line
    naming the key and its nearest valid neighbours (trainer.pretrain.lrr=1 -> lr), before
    any work. The config of reference is composed with the group choices of argv only."""
    import difflib

    dotted = [(a.lstrip("+~").partition("=")[0], a) for a in argv if "=" in a]
    dotted = [(k, a) for k, a in dotted if "." in k and not k.startswith(OPEN_KEYS)]
    if not dotted:
        return
    groups = [a for a in argv if "=" in a and "." not in a.partition("=")[0]]
    groups = [a.partition(",")[0] for a in groups if not a.startswith("-")]  # a sweep: its first
    ref = OmegaConf.to_container(compose(*groups, config_name=config_name), resolve=False)
    keys = _leaves(ref)
    for key, arg in dotted:
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


def _check_stage(cfg: DictConfig, stage: str, devices: int, num_nodes: int) -> None:
    s = cfg.trainer[stage]
    key = f"trainer.{stage}"
    _require(s.lr > 0, f"{key}.lr={s.lr} must be > 0")
    _require(s.schedule in SCHEDULES, f"{key}.schedule={s.schedule!r}; allowed: {SCHEDULES}")
    _require(s.batch_size > 0, f"{key}.batch_size={s.batch_size} must be > 0")
    _require(s.weight_decay >= 0, f"{key}.weight_decay={s.weight_decay} must be >= 0")
    per_update = s.batch_size * devices * num_nodes
    _require(
        s.global_batch % per_update == 0,
        f"{key}.global_batch={s.global_batch} must be a multiple of batch_size x devices x "
        f"num_nodes = {s.batch_size} x {devices} x {num_nodes} = {per_update} (the rest is "
        "gradient accumulation)",
    )


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError on the first bad setting."""
    _require(cfg.objective in OBJECTIVES, f"objective={cfg.objective!r}; allowed: {OBJECTIVES}")
    _require(cfg.data.seq_len > 0, f"data.seq_len={cfg.data.seq_len} must be > 0")
    _require(
        cfg.data.tokenizer in TOKENIZERS,
        f"data.tokenizer={cfg.data.tokenizer!r}; allowed: {TOKENIZERS}",
    )
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
    _require(m.rope_theta > 0, f"model.rope_theta={m.rope_theta} must be > 0")
    v = cfg.variant
    _require(v.scale in SCALES, f"variant.scale={v.scale!r}; allowed: {SCALES}")
    _require(
        v.s_init == "inv_mean_log_n" or isinstance(v.s_init, int | float),
        f"variant.s_init={v.s_init!r}; allowed: a number or 'inv_mean_log_n'",
    )
    _require(cfg.trainer.devices > 0, f"trainer.devices={cfg.trainer.devices} must be > 0")
    num_nodes = cfg.trainer.get("num_nodes", 1)
    _require(
        isinstance(num_nodes, int) and num_nodes > 0,
        f"trainer.num_nodes={num_nodes} must be an integer > 0",
    )
    for stage in OBJECTIVES:
        _check_stage(cfg, stage, cfg.trainer.devices, num_nodes)


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
