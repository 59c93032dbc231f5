"""The model a config describes, built in one place: its shape (cfg.model), its law
(cfg.variant, less the pipeline's facts) and its training length (cfg.data.seq_len). Every
run, eval, export and check builds it here, so a new field of the model is read once."""

from __future__ import annotations

import torch
from omegaconf import DictConfig, OmegaConf

from ssmax.model.attention import VariantConfig
from ssmax.model.transformer import ModelConfig, Transformer


def model_config(cfg: DictConfig) -> ModelConfig:
    return ModelConfig(**OmegaConf.to_container(cfg.model, resolve=True))


def variant_config(cfg: DictConfig) -> VariantConfig:
    model_part = OmegaConf.to_container(cfg.variant, resolve=True)
    model_part.pop("facts", None)  # the pipeline's and report's (config.variants), not the model's
    return VariantConfig(**model_part)


def build_model(cfg: DictConfig, seed: int | None = None) -> Transformer:
    """The configured model: cfg.model's shape, cfg.variant's law, trained at cfg.data.seq_len.
    seed: its weights drawn from a generator seeded with it (torch's global one, as a training
    run seeds it first: a seed bundle's seed is initialised as its solo run); None: from the
    generator as it stands (under torch.device("meta"): shapes only)."""
    if seed is not None:
        torch.manual_seed(seed)
    return Transformer(model_config(cfg), variant_config(cfg), cfg.data.seq_len)
