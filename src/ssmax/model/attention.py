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
    yarn         YaRN's temperature            m = (0.1 ln max(1, n / N) + 1)^2 (inference)

Each law's term (log n, p_n, ...) is written once, in laws.py (the positions: positions.py):
the export ships those files.

Laws that are not a factor on the query alone run the general path (laws.attention: scores,
the law's transform of each score, the mask, the normaliser, weights @ V; FlexAttention's
score_mod where it runs fused: a compiled forward on CUDA, softmax only), issue 43:

    scale_invariant   each score by its distance t = i - j: a_t S + m_t (variant.score_law)
    entmax            alpha-entmax in place of softmax (variant.normalizer)
    asentmax          a factor that reads the layer's input (laws.ADAPTIVE), with entmax
    positions=nape    NAPE (ASEntmax's authors' positions): no rotation, half the heads ALiBi
                      (positions.nape_slopes), the law's factor on the other half only

The query-factor laws keep the fused SDPA path (variant.path=auto); variant.path=explicit or
flex sends any law through the general path.

Issue 60's arms (docs/rival-laws.md), each a setting of its own that composes with the above:

    gate      gated attention: Y' = Y * sigmoid(wg x) after attention, before wo (laws.GATES;
              one gate per channel of each head, x the layer's normalised input)
    sink      a learned logit per head in the softmax's denominator (gpt-oss): SDPA with one
              extra key (laws.sink_attention), or the general path's extra entry
    adaptive_temperature   a normaliser (laws.NORMALIZERS): the general path

n is the number of keys the query attends to: position + 1 under the causal mask, which is
also the cache length when decoding with a KV cache; or, under variant.law_n=pass (YaRN's
dynamic scaling), the forward pass's length L for every query. Under variant.rope_scaling (YaRN's
interpolation by s = max(1, L / N)) the rotary frequencies change with L, so the cache holds
keys before RoPE and every key is rotated at the pass's frequencies when read (``rope_on_read``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ssmax.model.cache import KVCache
from ssmax.model.laws import (
    ADAPTIVE,
    ADAPTIVE_PARAMS,
    GATES,
    LAWS,
    NORMALIZER_PARAMS,
    NORMALIZERS,
    PARAMS,
    SCORE_LAWS,
    SCORE_PARAMS,
    length_term,
    score_mod,
    sink_attention,
)
from ssmax.model.laws import attention as explicit_attention
from ssmax.model.positions import YARN_RAMPS, nape_scaled, nape_slopes
from ssmax.model.rotary import apply_rope

SCALES = ("none", *LAWS)
PATHS = ("auto", "sdpa", "explicit", "flex")  # variant.path: how attention is computed
POSITIONS = (
    "rope",
    "nape",
)  # variant.positions: RoPE on every head, or NAPE (positions.nape_slopes)
LAW_N = ("query", "pass")  # variant.law_n: the n of a length law (laws' module docstring)
ROPE_SCALINGS = ("none", "yarn_dynamic")  # variant.rope_scaling: the frequencies by L / N


@dataclass
class VariantConfig:
    """The model's part of the `variant` config group (conf/variant/*.yaml; schema:
    ssmax.config.schema adds the variant's `facts:`)."""

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
    # yarn only: logits x (0.1 ln s + 1)^mscale_power; YaRN's sqrt(1/t) = 0.1 ln s + 1 scales q
    # and k alike, so its logits get the square (2); 1 scales the logits by 0.1 ln s + 1 itself
    mscale_power: float = field(default=2.0, metadata={"gt": 0})  # yarn: the power above
    # asentmax only (laws.ADAPTIVE): m = delta + softplus(w h + c) * log(n+1)^(gamma_max tanh(..))
    delta: float = 1.0  # ASEntmax's attn_scale_delta (its code's default)
    gamma_max: float = field(default=2.0, metadata={"gt": 0})  # its attn_scale_gamma_range
    # the general path's laws (laws.SCORE_LAWS, laws.NORMALIZERS)
    score_law: str = field(default="none", metadata={"choices": ("none", *SCORE_LAWS)})  # by t
    tau: float = field(default=10.0, metadata={"gt": 0})  # scale_invariant: the lengthscale
    normalizer: str = field(default="softmax", metadata={"choices": tuple(NORMALIZERS)})  # p(z)
    alpha: float = field(default=1.5, metadata={"gt": 1})  # entmax only: alpha-entmax's alpha
    # p-RoPE (positions.rope_frequencies): the fraction of rotary pairs that turn; null base: the
    # model's theta spacing, else (base x the evals' theta factor)^(-j / (K - 1))
    rope_fraction: float = field(default=1.0, metadata={"gt": 0, "le": 1})  # pairs that turn
    rope_base: float | None = field(default=None, metadata={"gt": 0})  # null: theta spacing
    # issue 60: after attention, the output gate (laws.GATES: elementwise, Y * sigmoid(wg x));
    # a learned sink logit per head in the softmax's denominator (gpt-oss), N(0, init_std)
    gate: str = field(default="none", metadata={"choices": ("none", *GATES)})  # after SDPA
    sink: bool = False  # one more logit per head in each softmax, with no value
    path: str = field(default="auto", metadata={"choices": PATHS})  # auto: SDPA where it can
    # issue 60, each rival as its own paper runs it (docs/rival-laws.md); the defaults are what
    # every law did before. Whether the evals' theta factor (protocol.rope_factor, x50) reaches
    # this variant's RoPE (and p-RoPE's base); false: its rotary frequencies stay as trained
    rope_scaled_at_eval: bool = True  # false: RoPE as trained at the evals ((k2), (m3))
    # the positions: RoPE on every head, or nape (ASEntmax's NAPE: no rotation, the first half
    # of the heads ALiBi with slopes 1, 1/2, ..., the rest NoPE, the law's factor on those only)
    positions: str = field(default="rope", metadata={"choices": POSITIONS})  # nape: (l2)
    # a length law's n: query (the keys query i sees, n_i = i + 1) or pass (the forward pass's
    # length L for every query: YaRN's dynamic scaling, one s = max(1, L / N) a pass)
    law_n: str = field(default="query", metadata={"choices": LAW_N})  # pass: (m2), (m3)
    # yarn_dynamic: YaRN's NTK-by-parts interpolation of the rotary frequencies by s = max(1, L /
    # N) of each forward pass (positions.yarn_frequencies); replaces the evals' theta factor
    rope_scaling: str = field(default="none", metadata={"choices": ROPE_SCALINGS})  # (m3)
    yarn_beta_fast: float = field(default=32.0, metadata={"gt": 0})  # YaRN's beta: pairs kept
    yarn_beta_slow: float = field(default=1.0, metadata={"gt": 0})  # YaRN's alpha: interpolated
    # the ramp between them: index (the authors' code, transformers') or ratio (Sec. 3.2's)
    yarn_ramp: str = field(default="index", metadata={"choices": YARN_RAMPS})  # the ramp


def inv_mean_log_n(train_len: int) -> float:
    """1 / mean_{n=1..N} log n: the s that makes s * log n average to 1 over training lengths."""
    return train_len / math.lgamma(train_len + 1)


def resolve_s_init(variant: VariantConfig, train_len: int) -> float:
    if variant.s_init == "inv_mean_log_n":
        return inv_mean_log_n(train_len)
    return float(variant.s_init)


def general(variant: VariantConfig) -> bool:
    """Whether the variant's attention runs the general path (laws.attention) rather than SDPA:
    a score law or a normaliser SDPA does not have, or variant.path asks for it."""
    if variant.path in ("explicit", "flex"):
        return True
    return (variant.score_law != "none" or variant.normalizer != "softmax"
            or variant.positions != "rope")  # fmt: skip


def law_params(variant: VariantConfig) -> dict[str, float]:
    """The general path's parameters of the variant (laws.attention's keywords)."""
    names = (*SCORE_PARAMS, *NORMALIZER_PARAMS)
    return {"score_law": variant.score_law, "normalizer": variant.normalizer,
            **{name: getattr(variant, name) for name in names}}  # fmt: skip


def variant_term(
    variant: VariantConfig, n: torch.Tensor, p_n: torch.Tensor | None, train_len: int = 0
) -> torch.Tensor | None:
    """The per-position part of the multiplier (log n, p_n, ...: the variant's law in laws.py)
    in float32, or None for softmax."""
    params = {name: getattr(variant, name) for name in PARAMS}
    return length_term(variant.scale, n, train_len=train_len, p_n=p_n, **params)


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
        self.general = general(variant)
        self.nape = variant.positions == "nape"  # no rotation; ALiBi slopes (0: NoPE heads)
        self.rope_on_read = variant.rope_scaling != "none"  # the cache holds keys before RoPE
        # the heads the law's factor multiplies (the last ones): all, or NAPE's NoPE heads
        self.scaled_heads = nape_scaled(n_heads) if self.nape else n_heads
        if self.nape:
            if variant.scale not in ("none", *ADAPTIVE):
                raise ValueError(f"variant.positions='nape' scales its NoPE heads by a law of "
                                 f"the input ({', '.join(ADAPTIVE)}) or none, not "
                                 f"variant.scale={variant.scale!r}")  # fmt: skip
            self.register_buffer("alibi", nape_slopes(n_heads), persistent=False)
        if variant.scale in ADAPTIVE:  # ASEntmax: its factor's two logits per head, from x
            self.len_beta = nn.Linear(dim, self.scaled_heads, bias=True)
            self.len_gamma = nn.Linear(dim, self.scaled_heads, bias=True)
            nn.init.zeros_(self.len_beta.bias)
            nn.init.zeros_(self.len_gamma.bias)
        elif variant.scale != "none":
            s = torch.full((n_heads,), resolve_s_init(variant, train_len))
            if variant.learn_s:
                self.s = nn.Parameter(s)
            else:  # variant (c): s = 1, not a parameter (adds nothing to the count)
                self.register_buffer("s", s, persistent=False)
        if variant.bias:
            self.b = nn.Parameter(torch.full((n_heads,), float(variant.b_init)))
        if variant.gate != "none":  # gated attention's W_theta: one gate per channel and head
            self.wg = nn.Linear(dim, dim, bias=False)
        if variant.sink:  # set by Transformer.reset_parameters (N(0, init_std), as GptOss's)
            self.sink = nn.Parameter(torch.zeros(n_heads))

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [B, H, T, D] rotated by RoPE at the last T of the given angles (none under NAPE)."""
        t = x.shape[-2]
        return x if self.nape else apply_rope(x, cos[-t:], sin[-t:])

    def general_params(self) -> dict[str, object]:
        """laws.attention's keywords for this layer: the variant's law, and NAPE's slopes."""
        params = law_params(self.variant)
        if self.nape:
            params["alibi"] = self.alibi
        return params

    def multiplier(self, term: torch.Tensor) -> torch.Tensor:
        """m[h, t] = s_h * term_t (+ b_h), float32."""
        m = self.s.float()[:, None] * term[None, :]
        if self.variant.bias:
            m = m + self.b.float()[:, None]
        return m

    def scale_query(self, q: torch.Tensor, x: torch.Tensor, term: torch.Tensor | None):  # noqa: ANN201
        """q [B, H, T, D] times the law's factor (in float32, back in v's dtype) for the layer
        input x [B, T, dim]: s * term (+ b), or an ADAPTIVE law's factor of term and x."""
        if term is None:
            return q
        if self.variant.scale in ADAPTIVE:
            params = {name: getattr(self.variant, name) for name in ADAPTIVE_PARAMS}
            m = ADAPTIVE[self.variant.scale](
                term[None, :, None], self.len_beta(x), self.len_gamma(x), **params
            )  # [B, T, H] (NAPE: its NoPE heads, the last ones)
            if self.scaled_heads < self.n_heads:  # the other heads keep their q
                ones = m.new_ones(*m.shape[:-1], self.n_heads - self.scaled_heads)
                m = torch.cat([ones, m], dim=-1)
            return (q.to(m.dtype) * m.transpose(1, 2)[..., None]).to(q.dtype)
        return (q.float() * self.multiplier(term)[None, :, :, None]).to(q.dtype)

    def gated(self, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The heads' output y [B, T, dim] (concatenated) through the variant's gate, whose
        logits read the layer's input x [B, T, dim]; y itself without one."""
        if self.variant.gate == "none":
            return y
        return GATES[self.variant.gate](y, self.wg(x))

    def sink_logits(self) -> dict[str, torch.Tensor]:
        """The general path's ``sink`` keyword: {"sink": [H]} for a sink variant, else {}."""
        return {"sink": self.sink} if self.variant.sink else {}

    def general_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int
    ) -> torch.Tensor:
        """The general path: FlexAttention's score_mod under a compiled forward on CUDA (or
        variant.path=flex), else laws.attention's explicit scores; the same law either way.
        Under auto, a chunk appended to a KV cache (past > 0) takes the explicit kernel:
        inductor's FlexAttention kernel for one query row after a symbolic past failed to
        compile on an H100 (torch 2.11; docs/rival-laws.md)."""
        params = self.general_params()
        flex = self.variant.path == "flex" or (
            self.variant.path == "auto"
            and q.is_cuda
            and params["normalizer"] == "softmax"
            and torch.compiler.is_compiling()
            and past == 0
            and not self.variant.sink  # FlexAttention has no extra key: the explicit kernel
        )
        if flex:  # softmax only: FlexAttention's normaliser
            from torch.nn.attention.flex_attention import flex_attention

            score_params = {name: params[name] for name in SCORE_PARAMS}
            mod = score_mod(params["score_law"], past, q.device, params.get("alibi"),
                            **score_params)  # fmt: skip
            return flex_attention(q, k.to(q.dtype), v.to(q.dtype), score_mod=mod)
        return explicit_attention(q, k, v, past=past, **params, **self.sink_logits())

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        term: torch.Tensor | None,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> torch.Tensor:
        """x [B, T, dim]; cos, sin [T or more, head_dim] (the last T rows are x's positions);
        term [T] (the law's, or None)."""
        bsz, t, dim = x.shape
        q, k, v = (
            w(x).view(bsz, t, self.n_heads, self.head_dim).transpose(1, 2)
            for w in (self.wq, self.wk, self.wv)
        )
        # cos, sin: the angles of this call's positions, or under rope_on_read of every key's
        q = self.rotate(q, cos, sin)
        if not self.rope_on_read:
            k = self.rotate(k, cos, sin)
        if self.general or self.variant.scale in ADAPTIVE:
            q = self.scale_query(q, x, term).to(v.dtype)
            past = 0
            if cache is not None:
                past = cache.length
                k, v = cache.update(layer, k, v)
            if self.rope_on_read:  # every key at this pass's frequencies
                k = self.rotate(k, cos, sin)
            y = self.general_attention(q, k, v, past)
            return self.wo(self.gated(y.transpose(1, 2).reshape(bsz, t, dim), x))
        if term is not None:
            q = (q.float() * self.multiplier(term)[None, :, :, None]).to(v.dtype)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.update(layer, k, v)
        if self.rope_on_read:  # every key at this pass's frequencies
            k = self.rotate(k, cos, sin)
        if self.variant.sink:  # the sink as one more key of SDPA (laws.sink_attention)
            y = sink_attention(q, k, v, self.sink, past=past)
        elif t == 1:  # one new token sees every key held and its own
            y = F.scaled_dot_product_attention(q, k, v)
        elif past == 0:  # (plain Python branches: a compiled forward guards on them)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # a chunk appended to a cache: causal within the chunk, full over the past
            keep = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(past)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        return self.wo(self.gated(y.transpose(1, 2).reshape(bsz, t, dim), x))
