"""A Llama whose attention multiplies each query by a length law m_i before the softmax:
softmax(m_i q_i K^T / sqrt(d)) ("Scalable-Softmax Is Superior for Attention", Nakanishi 2025,
Eq. 11). Shipped by ssmax-repro (`python -m ssmax.export`) beside the weights it loads.

n_i is the number of keys query i sees under the causal mask: its position + 1 (with a KV
cache, the cache length). N = config.ssmax_train_len; s, b per layer and head
(config.ssmax_s, config.ssmax_b: [layer][head]); m in float32, like RoPE and its product with q:

    log_n       m = s log n + b                 (b) s learnable, (c) s = 1, (d) with b, (e), (f)
    p_n         m = s p_n + b                   p_n = config.ssmax_p_n[min(n, N) - 1]
    qwen_log_n  m = s max(1, log n / log N)
    llama4      m = s (1 + beta log(1 + floor(n / (floor_scale N))))
    sqrt_log_n  m = s sqrt(log n)

Everything else is transformers' LlamaForCausalLM; RoPE theta is config.rope_parameters.
"""

from __future__ import annotations

import math

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama as llama

LAWS = ("log_n", "p_n", "qwen_log_n", "llama4", "sqrt_log_n")


class SSMaxLlamaConfig(LlamaConfig):
    model_type = "ssmax_llama"
    ssmax_law: str = "log_n"  # one of LAWS
    ssmax_train_len: int = 1024  # N: the training sequence length
    ssmax_s: list | None = None  # [layer][head]; None: 1 everywhere
    ssmax_b: list | None = None  # [layer][head]; None: no bias
    ssmax_p_n: list | None = None  # p_1..p_N (law p_n only)
    ssmax_beta: float = 0.1  # llama4 only
    ssmax_floor_scale: float = 1.0  # llama4 only, in units of N


def length_term(config: SSMaxLlamaConfig, n: torch.Tensor) -> torch.Tensor:
    """The law's per-position factor (before s and b) for key counts n, float32."""
    law, train_len, n = config.ssmax_law, config.ssmax_train_len, n.float()
    if law == "log_n":
        return torch.log(n)
    if law == "qwen_log_n":
        return (torch.log(n) / math.log(train_len)).clamp(min=1.0)
    if law == "llama4":
        steps = torch.floor(n / (config.ssmax_floor_scale * train_len))
        return 1.0 + config.ssmax_beta * torch.log1p(steps)
    if law == "sqrt_log_n":
        return torch.sqrt(torch.log(n))
    if law == "p_n":
        p_n = torch.tensor(config.ssmax_p_n, dtype=torch.float32, device=n.device)
        return p_n[(n.long().clamp(1, p_n.numel()) - 1)]
    raise ValueError(f"ssmax_law={law!r}; allowed: {LAWS}")


class SSMaxLlamaAttention(llama.LlamaAttention):
    """LlamaAttention.forward with one step added: q *= m (after RoPE, before the cache)."""

    def multiplier(self, position_ids: torch.Tensor) -> torch.Tensor:
        """m [batch, heads, positions, 1] in float32."""
        cfg, device, i = self.config, position_ids.device, self.layer_idx
        s = cfg.ssmax_s[i] if cfg.ssmax_s else [1.0] * cfg.num_attention_heads
        s = torch.tensor(s, dtype=torch.float32, device=device)
        m = s[None, :, None] * length_term(cfg, position_ids + 1)[:, None, :]
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
