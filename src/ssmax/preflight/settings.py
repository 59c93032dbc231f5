"""Checks on the composed Hydra config, run before any work starts: each field within its
schema rule (ssmax.config.rules), then the rules between fields (validate); check_compose
composes and validates what argv asks for.

Every problem is one line naming the key and what is allowed (ConfigError); entry points
print it and exit with status 2.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from omegaconf import DictConfig

from ssmax.config.compose import ConfigError, compose, first_choices, require
from ssmax.config.rules import RuleError, check_rules
from ssmax.config.schema import OBJECTIVES
from ssmax.data.fact_spec import spec_from_cfg
from ssmax.model.laws import ADAPTIVE

GPT2_VOCAB = 50257


def check_compose(argv: Sequence[str], config_name: str = "config") -> DictConfig:
    """Compose and validate what argv asks for (a sweep: its first choices), so that a value of
    the wrong type or out of range fails in one line before any work or job starts."""
    cfg = compose(*first_choices(argv), config_name=config_name)
    validate(cfg)
    return cfg


def _check_batch(cfg: DictConfig, stage: str) -> None:
    s, t = cfg.trainer[stage], cfg.trainer
    per_update = s.batch_size * t.devices * t.num_nodes
    require(
        s.global_batch % per_update == 0,
        f"trainer.{stage}.global_batch={s.global_batch} must be a multiple of batch_size x "
        f"devices x num_nodes = {s.batch_size} x {t.devices} x {t.num_nodes} = {per_update} "
        "(the rest is gradient accumulation)",
    )


def _check_facts(d: DictConfig) -> None:
    """data.facts (ssmax.data.fact_spec.check_spec's rules) and where facts can be planted."""
    try:
        spec = spec_from_cfg(d.facts)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    require(
        spec.fraction == 0 or d.source == "embedded" or bool(d.shards_dir),
        f"data.facts.fraction={spec.fraction} plants facts in indexed rows (data.source=embedded "
        f"or data.shards_dir), not in the data.source={d.source} stream: set "
        "data.facts.fraction=0, or prepare shards (python -m ssmax.data.prepare)",
    )


def _check_path(v: DictConfig, accelerator: str) -> None:
    """variant.path against the law (ssmax.model.attention): SDPA runs the query factors only,
    FlexAttention normalises with softmax and has no backward on the CPU."""
    if v.normalizer != "softmax":
        require(
            v.path in ("auto", "explicit"),
            f"variant.path={v.path!r} cannot run variant.normalizer={v.normalizer!r} (SDPA and "
            "FlexAttention normalise with softmax); allowed with it: 'auto', 'explicit'",
        )
    if v.score_law != "none" or v.scale in ADAPTIVE:
        law = f"variant.score_law={v.score_law!r}" if v.score_law != "none" else (
            f"variant.scale={v.scale!r}")  # fmt: skip
        require(
            v.path != "sdpa",
            f"variant.path='sdpa' cannot run {law} (SDPA takes a factor on the query only); "
            "allowed with it: 'auto', 'explicit', 'flex'",
        )
    require(
        not (v.sink and v.path == "flex"),
        "variant.path='flex' cannot run variant.sink=true (FlexAttention has no extra key for "
        "the sink); allowed with it: 'auto', 'sdpa', 'explicit'",
    )
    if v.path == "flex":
        require(
            accelerator not in ("cpu", "auto") or torch.cuda.is_available(),
            f"variant.path='flex' trains on CUDA only (FlexAttention has no backward on the CPU)"
            f" and trainer.accelerator={accelerator} trains on the CPU here; allowed on the CPU: "
            "'auto', 'explicit', 'sdpa'",
        )


def _check_positions(v: DictConfig) -> None:
    """NAPE and YaRN's interpolation (issue 60) against the rest of the variant."""
    if v.positions == "nape":
        require(
            v.scale in ("none", *ADAPTIVE),
            f"variant.positions='nape' scales its NoPE heads by a law of the input "
            f"({', '.join(ADAPTIVE)}) or none, not variant.scale={v.scale!r}",
        )
        require(
            v.path != "sdpa",
            "variant.path='sdpa' cannot run variant.positions='nape' (its ALiBi heads add a bias "
            "to each score); allowed with it: 'auto', 'explicit', 'flex'",
        )
        require(
            v.rope_scaling == "none" and v.rope_fraction == 1 and v.rope_base is None,
            "variant.positions='nape' rotates no head: variant.rope_scaling must be 'none', "
            "variant.rope_fraction 1 and variant.rope_base null",
        )
    if v.rope_scaling != "none":
        require(
            not v.rope_scaled_at_eval,
            f"variant.rope_scaling={v.rope_scaling!r} replaces the evals' theta factor: set "
            "variant.rope_scaled_at_eval=false (it would get both)",
        )
        require(
            v.rope_fraction == 1 and v.rope_base is None,
            f"variant.rope_scaling={v.rope_scaling!r} interpolates RoPE's theta spacing: "
            "variant.rope_fraction must be 1 and variant.rope_base null",
        )
        require(
            v.yarn_beta_fast > v.yarn_beta_slow,
            f"variant.yarn_beta_fast={v.yarn_beta_fast} must be > variant.yarn_beta_slow="
            f"{v.yarn_beta_slow} (YaRN's beta > alpha)",
        )


def validate(cfg: DictConfig) -> None:
    """Raise ConfigError on the first bad setting: a field outside its schema rule (ranges,
    choices: ssmax.config.schema), then the rules between fields."""
    try:
        check_rules(cfg)
    except RuleError as err:
        raise ConfigError(str(err)) from None
    if cfg.data.tokenizer == "gpt2":
        require(
            cfg.data.vocab_size == GPT2_VOCAB,
            f"data.vocab_size={cfg.data.vocab_size} must be {GPT2_VOCAB} with data.tokenizer=gpt2",
        )
    require(
        cfg.preset.model == cfg.model.name,
        f"model={cfg.model.name} does not match preset={cfg.preset.name}, which expects "
        f"model={cfg.preset.model}; drop the model override or pick another preset",
    )
    m = cfg.model
    require(m.dim % m.n_heads == 0, f"model.dim={m.dim} must be divisible by model.n_heads")
    require((m.dim // m.n_heads) % 2 == 0, "model.dim / model.n_heads must be even for RoPE")
    v = cfg.variant
    require(
        not isinstance(v.s_init, str) or v.s_init == "inv_mean_log_n",
        f"variant.s_init={v.s_init!r}; allowed: a number or 'inv_mean_log_n'",
    )
    _check_path(v, cfg.trainer.accelerator)
    _check_positions(v)
    for stage in OBJECTIVES:
        _check_batch(cfg, stage)
    d = cfg.data
    _check_facts(d)
    require(
        d.sft_context_words_min <= d.sft_context_words_max,
        f"data.sft_context_words_min={d.sft_context_words_min} must be <= "
        f"data.sft_context_words_max={d.sft_context_words_max}",
    )
    require(
        d.val_fraction + d.test_fraction < 1,
        f"data.val_fraction + data.test_fraction = {d.val_fraction + d.test_fraction:g} must be "
        "< 1 (the rest is the training split)",
    )
