"""A Llama whose attention multiplies each query by a length law m_i before the softmax:
softmax(m_i q_i K^T / sqrt(d)) ("Scalable-Softmax Is Superior for Attention", Nakanishi 2025,
Eq. 11). Shipped by ssmax-repro (`python -m ssmax.export`) beside the weights it loads, with
laws.py: every law's term, the same file the project's model runs (ssmax/model/laws.py), and
positions.py: p-RoPE, NAPE and YaRN's interpolation (ssmax/model/positions.py), likewise.

n_i is the number of keys query i sees under the causal mask: its position + 1 (with a KV
cache, the cache length). m = s * term(n) + b in float32, like RoPE and its product with q;
term = config.ssmax_law's (laws.py), N = config.ssmax_train_len, s and b per layer and head
(config.ssmax_s, config.ssmax_b: [layer][head]), p_n = config.ssmax_p_n (law p_n only), a law's
own parameters config.ssmax_<name> (laws.PARAMS: beta, floor_scale for llama4).

Everything else is transformers' LlamaForCausalLM; RoPE theta is config.rope_parameters.

Laws beyond a factor on the query (issue 43), laws.py's general path again:
config.ssmax_score_law (scale_invariant: each score by its distance, ssmax_tau),
config.ssmax_normalizer (entmax: ssmax_alpha), an ADAPTIVE factor (asentmax: per layer the
self_attn.len_beta / len_gamma projections of the layer's input, ssmax_delta, ssmax_gamma_max),
and p-RoPE (ssmax_rope_fraction, ssmax_rope_base; its base scaled as theta is, by
rope_parameters' theta over ssmax_rope_theta0, the trained one).

Issue 60, the rivals as their papers run them: ssmax_rope_scaled_at_eval false keeps RoPE at
the trained theta (ssmax_rope_theta0) whatever rope_parameters' theta says; ssmax_positions nape
(no rotation, positions.nape_slopes on the first half of the heads, the law's factor on the other
half); ssmax_law_n pass (a length law's n is the forward pass's length L = the last position + 1,
per row, for every query: YaRN's dynamic scaling); ssmax_rope_scaling yarn_dynamic
(positions.yarn_frequencies at s = max(1, L / N) of each forward pass: the cache holds keys before
RoPE, and every key is rotated at the pass's frequencies, its position counted back from the
row's last one).

Issue 60's arms: config.ssmax_gate (gated attention: per layer self_attn.g_proj, the gate's
logits from the layer's input, laws.GATES on the heads' output before o_proj),
config.ssmax_sink (per layer self_attn.sink, a logit per head in the softmax's denominator:
laws.sink_attention, or the general path's sink where padding or a general law asks for it),
and ssmax_normalizer adaptive_temperature (the general path). They compose with the above: the
sink joins NAPE's ALiBi scores on the general path, and under yarn_dynamic the keys are rotated
before the sink's extra key is added (it has no position).
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama as llama

try:  # the exported folder: laws.py and positions.py beside this file (loaded with this one)
    from .laws import (
        ADAPTIVE,
        ADAPTIVE_PARAMS,
        GATES,
        NORMALIZER_PARAMS,
        PARAMS,
        SCORE_PARAMS,
        length_term,
        sink_attention,
    )
    from .laws import attention as general_attention
    from .positions import YARN_PARAMS, nape_scaled, nape_slopes, rope_frequencies, yarn_frequencies
except ModuleNotFoundError:  # ssmax-repro itself: the files are ssmax/model/laws.py, positions.py
    if __package__ != "ssmax.export":
        raise
    from ssmax.model.laws import (
        ADAPTIVE,
        ADAPTIVE_PARAMS,
        GATES,
        NORMALIZER_PARAMS,
        PARAMS,
        SCORE_PARAMS,
        length_term,
        sink_attention,
    )
    from ssmax.model.laws import attention as general_attention
    from ssmax.model.positions import (
        YARN_PARAMS,
        nape_scaled,
        nape_slopes,
        rope_frequencies,
        yarn_frequencies,
    )


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
    ssmax_mscale_power: float = 2.0  # yarn only
    ssmax_delta: float = 1.0  # asentmax only
    ssmax_gamma_max: float = 2.0  # asentmax only
    ssmax_score_law: str = "none"  # laws.SCORE_LAWS, or none
    ssmax_tau: float = 10.0  # scale_invariant only
    ssmax_normalizer: str = "softmax"  # laws.NORMALIZERS
    ssmax_alpha: float = 1.5  # entmax only
    ssmax_rope_fraction: float = 1.0  # p-RoPE: the fraction of rotary pairs that turn
    ssmax_rope_base: float | None = None  # p-RoPE's base (None: rope_theta's spacing)
    ssmax_rope_theta0: float | None = None  # the trained theta (None: rope_theta as it is)
    ssmax_rope_scaled_at_eval: bool = True  # false: RoPE at ssmax_rope_theta0 whatever theta
    ssmax_positions: str = "rope"  # or nape (positions.nape_slopes)
    ssmax_law_n: str = "query"  # or pass: n = the forward pass's length for every query
    ssmax_rope_scaling: str = "none"  # or yarn_dynamic (positions.yarn_frequencies)
    ssmax_yarn_beta_fast: float = 32.0  # yarn_dynamic only
    ssmax_yarn_beta_slow: float = 1.0  # yarn_dynamic only
    ssmax_yarn_ramp: str = "index"  # yarn_dynamic only
    ssmax_gate: str = "none"  # laws.GATES, or none: the gate on the heads' output
    ssmax_sink: bool = False  # a learned sink logit per head (self_attn.sink)


def general(cfg: SSMaxLlamaConfig) -> bool:
    """Whether attention runs laws.py's general path rather than transformers' own."""
    return (cfg.ssmax_score_law != "none" or cfg.ssmax_normalizer != "softmax"
            or cfg.ssmax_law in ADAPTIVE or cfg.ssmax_positions != "rope")  # fmt: skip


def own_rope(cfg: SSMaxLlamaConfig) -> bool:
    """Whether RoPE is this file's (SSMaxRotaryEmbedding) rather than transformers' default."""
    return (cfg.ssmax_rope_fraction != 1 or cfg.ssmax_rope_base is not None
            or not cfg.ssmax_rope_scaled_at_eval or cfg.ssmax_rope_scaling != "none")  # fmt: skip


def rope_theta(config: SSMaxLlamaConfig) -> float:
    """The theta RoPE runs at: rope_parameters', or the trained one where the evals' factor
    does not reach this law (ssmax_rope_scaled_at_eval false)."""
    theta = config.rope_parameters["rope_theta"]
    if not config.ssmax_rope_scaled_at_eval:
        return config.ssmax_rope_theta0 or theta
    return theta


class SSMaxRotaryEmbedding(llama.LlamaRotaryEmbedding):
    """p-RoPE (positions.rope_frequencies in place of theta^(-2j/d), transformers' default rope),
    the trained theta (ssmax_rope_scaled_at_eval false), or YaRN's interpolation at each
    forward pass's s = max(1, L / N), L the row's last position + 1 (positions.yarn_frequencies:
    float64, then float32 as transformers' frequencies are, angles in float32 as theirs)."""

    @staticmethod
    def compute_default_rope_parameters(
        config: SSMaxLlamaConfig, **_
    ) -> tuple[torch.Tensor, float]:
        theta = rope_theta(config)
        head_dim = config.hidden_size // config.num_attention_heads
        scale = theta / (config.ssmax_rope_theta0 or theta)
        freqs = rope_frequencies(head_dim, theta, rope_fraction=config.ssmax_rope_fraction,
                                 rope_base=config.ssmax_rope_base, theta_scale=scale)  # fmt: skip
        return freqs.float(), 1.0

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple:
        cfg = self.config
        if cfg.ssmax_rope_scaling == "none":
            return super().forward(x, position_ids)
        head_dim = cfg.hidden_size // cfg.num_attention_heads
        params = {name: getattr(cfg, f"ssmax_{name}") for name in YARN_PARAMS}
        lengths = (position_ids[:, -1] + 1).tolist()  # each row's L: its last position + 1
        inv_freq = torch.stack([
            yarn_frequencies(head_dim, rope_theta(cfg), scale=max(1.0, n / cfg.ssmax_train_len),
                             train_len=cfg.ssmax_train_len, **params).float()
            for n in lengths
        ]).to(x.device)  # fmt: skip
        freqs = position_ids[..., None].float() * inv_freq[:, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)


class SSMaxLlamaAttention(llama.LlamaAttention):
    """LlamaAttention.forward with one step added: q *= m (after RoPE, before the cache); and
    for the general path's laws, laws.attention in place of transformers' attention."""

    def __init__(self, config: SSMaxLlamaConfig, layer_idx: int) -> None:
        super().__init__(config, layer_idx)
        heads = config.num_attention_heads
        self.nape = config.ssmax_positions == "nape"
        # the heads the law's factor multiplies (the last ones): all, or NAPE's NoPE heads
        self.scaled_heads = nape_scaled(heads) if self.nape else heads
        if config.ssmax_law in ADAPTIVE:  # ASEntmax: its factor's two logits per head
            self.len_beta = torch.nn.Linear(config.hidden_size, self.scaled_heads, bias=True)
            self.len_gamma = torch.nn.Linear(config.hidden_size, self.scaled_heads, bias=True)
        if config.ssmax_rope_scaling != "none":  # the keys' angles at each pass's frequencies
            self.key_rotary = SSMaxRotaryEmbedding(config)
        if config.ssmax_gate != "none":  # gated attention's W_theta (laws.GATES)
            self.g_proj = torch.nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        if config.ssmax_sink:  # one logit per head, loaded from the weights
            self.sink = torch.nn.Parameter(torch.zeros(heads))

    def keys_seen(self, position_ids: torch.Tensor) -> torch.Tensor:
        """n of each query [batch, positions]: position + 1, or (ssmax_law_n pass) the
        forward pass's length, the row's last position + 1, for every query."""
        if self.config.ssmax_law_n == "pass":
            return (position_ids[:, -1:] + 1).expand_as(position_ids)
        return position_ids + 1

    def adaptive(self, position_ids: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """An ADAPTIVE law's m [batch, heads, positions, 1] from the layer's input (1 on the
        heads it does not scale: NAPE's ALiBi heads)."""
        cfg = self.config
        term = length_term(cfg.ssmax_law, self.keys_seen(position_ids),
                           train_len=cfg.ssmax_train_len)  # fmt: skip
        params = {name: getattr(cfg, f"ssmax_{name}") for name in ADAPTIVE_PARAMS}
        m = ADAPTIVE[cfg.ssmax_law](term[..., None], self.len_beta(hidden),
                                    self.len_gamma(hidden), **params)  # fmt: skip
        if self.scaled_heads < cfg.num_attention_heads:
            ones = m.new_ones(*m.shape[:-1], cfg.num_attention_heads - self.scaled_heads)
            m = torch.cat([ones, m], dim=-1)
        return m.transpose(1, 2)[..., None]

    def multiplier(self, position_ids: torch.Tensor) -> torch.Tensor:
        """m [batch, heads, positions, 1] in float32."""
        cfg, device, i = self.config, position_ids.device, self.layer_idx
        s = cfg.ssmax_s[i] if cfg.ssmax_s else [1.0] * cfg.num_attention_heads
        s = torch.tensor(s, dtype=torch.float32, device=device)
        p_n = cfg.ssmax_p_n
        p_n = None if p_n is None else torch.tensor(p_n, dtype=torch.float32, device=device)
        params = {name: getattr(cfg, f"ssmax_{name}") for name in PARAMS}
        term = length_term(cfg.ssmax_law, self.keys_seen(position_ids),
                           train_len=cfg.ssmax_train_len, p_n=p_n, **params)  # fmt: skip
        m = s[None, :, None] * term[:, None, :]
        if cfg.ssmax_b:
            m = m + torch.tensor(cfg.ssmax_b[i], dtype=torch.float32, device=device)[None, :, None]
        return m[..., None]

    def gated(self, out: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The heads' output [batch, positions, hidden] through the gate (laws.GATES), if any."""
        if self.config.ssmax_gate == "none":
            return out
        return GATES[self.config.ssmax_gate](out, self.g_proj(hidden))

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
        cfg, position_ids = self.config, kwargs["position_ids"]
        on_read = cfg.ssmax_rope_scaling != "none"  # keys rotated after the cache
        if on_read:
            cos, sin = position_embeddings
            q = q * cos.unsqueeze(1) + llama.rotate_half(q) * sin.unsqueeze(1)
        elif not self.nape:  # NAPE rotates no head
            q, k = llama.apply_rotary_pos_emb(q, k, *position_embeddings)
        if cfg.ssmax_law in ADAPTIVE:
            m = self.adaptive(position_ids, hidden_states)
            q = (q.to(m.dtype) * m).to(v.dtype)
        elif cfg.ssmax_law != "none":
            q = (q.float() * self.multiplier(position_ids)).to(v.dtype)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx, kwargs=kwargs)
        if on_read:  # each slot's position counted back from the row's last one
            slots = torch.arange(k.shape[-2], device=k.device)
            keys = position_ids[:, -1:] - (k.shape[-2] - 1 - slots)[None, :]
            cos, sin = self.key_rotary(v, keys)
            k = k * cos.unsqueeze(1) + llama.rotate_half(k) * sin.unsqueeze(1)
        past = k.shape[-2] - q.shape[-2]
        if cfg.ssmax_sink and not general(cfg) and not isinstance(attention_mask, torch.Tensor):
            out = sink_attention(q, k, v, self.sink, past=past)  # the model's own kernel
            out = out.transpose(1, 2).reshape(*input_shape, -1).contiguous()
            return self.o_proj(self.gated(out, hidden_states)), None
        if general(cfg) or cfg.ssmax_sink:  # distances and the causal mask by cache slot
            keep = None  # padding from the mask
            if isinstance(attention_mask, torch.Tensor):
                mask = attention_mask[..., : k.shape[-2]]
                keep = mask if mask.dtype == torch.bool else mask == 0
            names = (*SCORE_PARAMS, *NORMALIZER_PARAMS)
            params = {name: getattr(cfg, f"ssmax_{name}") for name in names}
            if self.nape:
                params["alibi"] = nape_slopes(cfg.num_attention_heads, device=q.device)
            sink = {"sink": self.sink} if cfg.ssmax_sink else {}
            out = general_attention(q, k, v, past=past, keep=keep,
                            score_law=cfg.ssmax_score_law, normalizer=cfg.ssmax_normalizer,
                            **params, **sink)  # fmt: skip
            out = out.transpose(1, 2).reshape(*input_shape, -1).contiguous()
            return self.o_proj(self.gated(out, hidden_states)), None
        attention = llama.ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, llama.eager_attention_forward
        )
        out, weights = attention(
            self, q, k, v, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling, **kwargs,
        )  # fmt: skip
        out = self.gated(out.reshape(*input_shape, -1).contiguous(), hidden_states)
        return self.o_proj(out), weights


class SSMaxLlamaForCausalLM(LlamaForCausalLM):
    config_class = SSMaxLlamaConfig

    def __init__(self, config: SSMaxLlamaConfig) -> None:
        super().__init__(config)
        for i, layer in enumerate(self.model.layers):  # same weights, the law added
            layer.self_attn = SSMaxLlamaAttention(config, i)
        if own_rope(config):
            self.model.rotary_emb = SSMaxRotaryEmbedding(config)
        self.post_init()
