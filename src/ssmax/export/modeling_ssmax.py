"""A Llama whose attention multiplies each query by a length law m_i before the softmax:
softmax(m_i q_i K^T / sqrt(d)) ("Scalable-Softmax Is Superior for Attention", Nakanishi 2025,
Eq. 11). Shipped by ssmax-repro (`python -m ssmax.export`) beside the weights it loads, with
laws.py: every law's term, the same file the project's model runs (ssmax/model/laws.py).

n_i is the number of keys query i sees under the causal mask: its position + 1 (with a KV
cache, the cache length). m = s * term(n) + b in float32, like RoPE and its product with q;
term = config.ssmax_law's (laws.py), N = config.ssmax_train_len, s and b per layer and head
(config.ssmax_s, config.ssmax_b: [layer][head]), p_n = config.ssmax_p_n (law p_n only), a law's
own parameters config.ssmax_<name> (laws.PARAMS: beta, floor_scale for llama4).

Everything else is transformers' LlamaForCausalLM; RoPE theta is config.rope_parameters.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama as llama

try:  # the exported folder: laws.py beside this file (transformers loads it with this one)
    from .laws import PARAMS, length_term
except ModuleNotFoundError:  # ssmax-repro itself: the one file is ssmax/model/laws.py
    if __package__ != "ssmax.export":
        raise
    from ssmax.model.laws import PARAMS, length_term


class SSMaxLlamaConfig(LlamaConfig):
    model_type = "ssmax_llama"
    ssmax_law: str = "log_n"  # one of laws.LAWS
    ssmax_train_len: int = 1024  # N: the training sequence length
    ssmax_s: list | None = None  # [layer][head]; None: 1 everywhere
    ssmax_b: list | None = None  # [layer][head]; None: no bias
    ssmax_p_n: list | None = None  # p_1..p_N (law p_n only)
    # a law's own parameters (laws.PARAMS), each written by the export, declared here or not
    ssmax_beta: float = 0.1  # llama4 only
    ssmax_floor_scale: float = 1.0  # llama4 only, in units of N


class SSMaxLlamaAttention(llama.LlamaAttention):
    """LlamaAttention.forward with one step added: q *= m (after RoPE, before the cache)."""

    def multiplier(self, position_ids: torch.Tensor) -> torch.Tensor:
        """m [batch, heads, positions, 1] in float32."""
        cfg, device, i = self.config, position_ids.device, self.layer_idx
        s = cfg.ssmax_s[i] if cfg.ssmax_s else [1.0] * cfg.num_attention_heads
        s = torch.tensor(s, dtype=torch.float32, device=device)
        p_n = cfg.ssmax_p_n
        p_n = None if p_n is None else torch.tensor(p_n, dtype=torch.float32, device=device)
        params = {name: getattr(cfg, f"ssmax_{name}") for name in PARAMS}
        term = length_term(
            cfg.ssmax_law, position_ids + 1, train_len=cfg.ssmax_train_len, p_n=p_n, **params
        )
        m = s[None, :, None] * term[:, None, :]
        if cfg.ssmax_b:
            m = m + torch.tensor(cfg.ssmax_b[i], dtype=torch.float32, device=device)[None, :, None]
        return m[..., None]

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: llama.Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
        q, k = llama.apply_rotary_pos_emb(q, k, *position_embeddings)
        q = (q.float() * self.multiplier(kwargs["position_ids"])).to(v.dtype)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx, kwargs=kwargs)
        attention = llama.ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, llama.eager_attention_forward
        )
        out, weights = attention(
            self, q, k, v, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling, **kwargs,
        )  # fmt: skip
        return self.o_proj(out.reshape(*input_shape, -1).contiguous()), weights


class SSMaxLlamaForCausalLM(LlamaForCausalLM):
    config_class = SSMaxLlamaConfig

    def __init__(self, config: SSMaxLlamaConfig) -> None:
        super().__init__(config)
        for i, layer in enumerate(self.model.layers):  # same weights, the law added
            layer.self_attn = SSMaxLlamaAttention(config, i)
        self.post_init()
