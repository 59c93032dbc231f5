"""The Llama-2-style LM and its attention variants."""

from ssmax.model.attention import VariantConfig, inv_mean_log_n
from ssmax.model.cache import KVCache
from ssmax.model.transformer import ModelConfig, Transformer, count_parameters, load_backbone

__all__ = [
    "KVCache",
    "ModelConfig",
    "Transformer",
    "VariantConfig",
    "count_parameters",
    "inv_mean_log_n",
    "load_backbone",
]
