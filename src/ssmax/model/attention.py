"""Causal self-attention and every attention variant of the paper.

Each variant only multiplies the query at position i by a factor m_i (per head) before the
fused ``F.scaled_dot_product_attention``, so softmax(m_i * q_i K^T / sqrt(d)) is computed by the
same kernel for every variant (Sec. 2.3, Eq. 11):

    a  softmax                    m = 1
    b  SSMax                      m = s * log n          s learnable per layer and head
    c  SSMax, no scaling param    m = log n              (s fixed to 1)
    d  SSMax with bias            m = s * log n + b      (Eq. 4)
    e/f swapped-in SSMax          as b, s initialised to 1 / mean_{n<=N} log n
    pn rationale model            m = s * p_n + b        p_n shared by all layers (Eq. 3)

Beyond the paper, the length laws of the field (conf/variant/g_ to j_), N the training length:

    qwen_log_n   Qwen's log-n scaling          m = s * max(1, log_N n)
    llama4       Llama 4's attention temp.     m = 1 + beta * log(1 + floor(n / floor_scale))
    sqrt_log_n   a slower-growing law          m = s * sqrt(log n)

Each law's term (log n, p_n, ...) is written once, in laws.py: the export ships that file.

n is the number of keys the query attends to: position + 1 under the causal mask, which is
also the cache length when decoding with a KV cache.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ssmax.model.cache import KVCache
from ssmax.model.laws import LAWS, PARAMS
from ssmax.model.laws import length_term as law_term
from ssmax.model.rope import apply_rope

SCALES = ("none", *LAWS)


@dataclass
class VariantConfig:
    """The model's part of the `variant` config group (conf/variant/*.yaml; schema:
    ssmax.schema adds the variant's `facts:`)."""

    name: str = "a_softmax"  # the option's name
    scale: str = field(default="none", metadata={"choices": SCALES})  # the length term on q
    learn_s: bool = False  # s is a parameter per layer and head (else a fixed buffer)
    s_init: int | float | str = 1.0  # a number, or "inv_mean_log_n" (Sec. 3 (e): 1 / mean log n)
    bias: bool = False  # learnable b per layer and head, added to the multiplier (Eq. 4)
    b_init: float = 0.0  # b's initial value
    pn_init: float = 1.0  # Sec. 2.1: p_n initialised to 1
    # the laws' own parameters (laws.PARAMS: the export writes them as config.json's ssmax_*)
    beta: float = 0.1  # llama4 only: the temperature's slope (Llama 4's attn_scale)
    floor_scale: float = field(default=1.0, metadata={"gt": 0})  # llama4 only: n's step, in N


def inv_mean_log_n(train_len: int) -> float:
    """1 / mean_{n=1..N} log n: the s that makes s * log n average to 1 over training lengths."""
    return train_len / math.lgamma(train_len + 1)


def resolve_s_init(variant: VariantConfig, train_len: int) -> float:
    if variant.s_init == "inv_mean_log_n":
        return inv_mean_log_n(train_len)
    return float(variant.s_init)


def length_term(
    variant: VariantConfig, n: torch.Tensor, p_n: torch.Tensor | None, train_len: int = 0
) -> torch.Tensor | None:
    """The per-position part of the multiplier (log n, p_n, ...: the variant's law in laws.py)
    in float32, or None for softmax."""
    params = {name: getattr(variant, name) for name in PARAMS}
    return law_term(variant.scale, n, train_len=train_len, p_n=p_n, **params)


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, variant: VariantConfig, train_len: int) -> None:
        super().__init__()
        if dim % n_heads:
            raise ValueError(f"model.dim={dim} must be divisible by model.n_heads={n_heads}")
        self.n_heads, self.head_dim, self.variant = n_heads, dim // n_heads, variant
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        if variant.scale != "none":
            s = torch.full((n_heads,), resolve_s_init(variant, train_len))
            if variant.learn_s:
                self.s = nn.Parameter(s)
            else:  # variant (c): s = 1, not a parameter (adds nothing to the count)
                self.register_buffer("s", s, persistent=False)
        if variant.bias:
            self.b = nn.Parameter(torch.full((n_heads,), float(variant.b_init)))

    def multiplier(self, term: torch.Tensor) -> torch.Tensor:
        """m[h, t] = s_h * term_t (+ b_h), float32."""
        m = self.s.float()[:, None] * term[None, :]
        if self.variant.bias:
            m = m + self.b.float()[:, None]
        return m

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        term: torch.Tensor | None,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> torch.Tensor:
        bsz, t, dim = x.shape
        q, k, v = (
            w(x).view(bsz, t, self.n_heads, self.head_dim).transpose(1, 2)
            for w in (self.wq, self.wk, self.wv)
        )
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if term is not None:
            q = (q.float() * self.multiplier(term)[None, :, :, None]).to(v.dtype)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.update(layer, k, v)
        if t == 1:  # one new token sees every key held and its own
            y = F.scaled_dot_product_attention(q, k, v)
        elif past == 0:  # (plain Python branches: a compiled forward guards on them)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # a chunk appended to a cache: causal within the chunk, full over the past
            keep = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(past)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.wo(y.transpose(1, 2).reshape(bsz, t, dim))
