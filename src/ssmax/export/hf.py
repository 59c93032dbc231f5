"""This project's Transformer as a Hugging Face transformers model.

The architecture is Llama's (RoPE "rotate half", RMSNorm, SwiGLU, no biases, untied head), so
every weight maps one to one. Softmax (a) becomes a plain LlamaForCausalLM; every other law a
SSMaxLlamaForCausalLM (modeling_ssmax.py, shipped in the folder), whose config carries the
law's parameters: s and b per layer and head, p_n, N and the law's own (laws.PARAMS: beta,
floor_scale), and how it places positions (p-RoPE, NAPE, YaRN's interpolation, whether the
evals' theta factor reaches its RoPE) and issue 60's gate (self_attn.g_proj) and sink logit
(self_attn.sink). The laws themselves are ssmax/model/laws.py and the positions
ssmax/model/positions.py, both shipped in the folder too.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel

from ssmax.export.modeling_ssmax import SSMaxLlamaConfig, SSMaxLlamaForCausalLM
from ssmax.model import Transformer, VariantConfig, laws

# project name -> transformers name, inside each block
BLOCK_KEYS = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn.wq": "self_attn.q_proj", "attn.wk": "self_attn.k_proj",
    "attn.wv": "self_attn.v_proj", "attn.wo": "self_attn.o_proj",
    "ffn.w1": "mlp.gate_proj", "ffn.w3": "mlp.up_proj", "ffn.w2": "mlp.down_proj",
    "attn.len_beta": "self_attn.len_beta", "attn.len_gamma": "self_attn.len_gamma",
    "attn.wg": "self_attn.g_proj", "attn": "self_attn",  # issue 60: the gate, attn.sink
}  # fmt: skip
TOP_KEYS = {"tok_emb": "model.embed_tokens", "norm": "model.norm", "lm_head": "lm_head"}
LAW_KEYS = ("attn.s", "attn.b", "p_n")  # go to the config, not to the weights


def hf_key(key: str) -> str:
    """The transformers name of one of this project's weights."""
    module, _, leaf = key.rpartition(".")
    if module in TOP_KEYS:
        return f"{TOP_KEYS[module]}.{leaf}"
    _, index, inner = module.split(".", 2)  # layers.<i>.<inner>
    return f"model.layers.{index}.{BLOCK_KEYS[inner]}.{leaf}"


def hf_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    return {
        hf_key(k): v.detach().float().clone()
        for k, v in model.state_dict().items()
        if not k.endswith(LAW_KEYS)
    }


def hf_config(model: Transformer, eos_id: int, rope_factor: float = 1.0) -> LlamaConfig:
    """The Llama config of the model (theta x rope_factor), with the law for every variant but
    softmax. Values are float32 written as JSON floats: they read back bit for bit."""
    cfg, variant = model.cfg, model.variant
    common = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_heads, rms_norm_eps=cfg.norm_eps, hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": model.rope_theta * rope_factor},
        max_position_embeddings=model.train_len, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, initializer_range=cfg.init_std,
        bos_token_id=None, eos_token_id=eos_id, pad_token_id=eos_id,
    )  # fmt: skip
    if plain_softmax(variant):
        return LlamaConfig(**common)
    attn = [layer.attn for layer in model.layers]
    factor = variant.scale not in ("none", *laws.ADAPTIVE)  # s (and b) per layer and head
    own = (*laws.PARAMS, *laws.ADAPTIVE_PARAMS, *laws.SCORE_PARAMS, *laws.NORMALIZER_PARAMS)
    return SSMaxLlamaConfig(
        **common,
        ssmax_law=variant.scale,
        ssmax_train_len=model.train_len,
        ssmax_s=[a.s.float().tolist() for a in attn] if factor else None,
        ssmax_b=[a.b.float().tolist() for a in attn] if variant.bias else None,
        ssmax_p_n=model.p_n.float().tolist() if variant.scale == "p_n" else None,
        **{f"ssmax_{name}": float(getattr(variant, name)) for name in own},
        ssmax_score_law=variant.score_law,
        ssmax_normalizer=variant.normalizer,
        ssmax_rope_fraction=float(variant.rope_fraction),
        ssmax_rope_base=None if variant.rope_base is None else float(variant.rope_base),
        ssmax_rope_theta0=float(cfg.rope_theta),
        ssmax_rope_scaled_at_eval=bool(variant.rope_scaled_at_eval),
        ssmax_positions=variant.positions,
        ssmax_law_n=variant.law_n,
        ssmax_rope_scaling=variant.rope_scaling,
        ssmax_yarn_beta_fast=float(variant.yarn_beta_fast),
        ssmax_yarn_beta_slow=float(variant.yarn_beta_slow),
        ssmax_yarn_ramp=variant.yarn_ramp,
        ssmax_gate=variant.gate,
        ssmax_sink=bool(variant.sink),
    )


def plain_softmax(variant: VariantConfig) -> bool:
    """Softmax attention with RoPE as transformers' Llama has it: no law to ship."""
    return (variant.scale == "none" and variant.score_law == "none"
            and variant.normalizer == "softmax" and variant.rope_fraction == 1
            and variant.rope_base is None and variant.rope_scaled_at_eval
            and variant.positions == "rope" and variant.rope_scaling == "none"
            and variant.gate == "none" and not variant.sink)  # fmt: skip


def to_transformers(model: Transformer, eos_id: int, rope_factor: float = 1.0) -> PreTrainedModel:
    """A transformers model with the model's weights (float32, eval mode)."""
    config = hf_config(model, eos_id, rope_factor)
    cls = SSMaxLlamaForCausalLM if isinstance(config, SSMaxLlamaConfig) else LlamaForCausalLM
    hf = cls(config)
    hf.load_state_dict(hf_state_dict(model), strict=True)
    return hf.eval()
