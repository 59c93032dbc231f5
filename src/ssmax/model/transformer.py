"""A Llama-2-style decoder (App. A): RoPE, RMSNorm, SwiGLU, no biases, untied embeddings."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ssmax.model.attention import Attention, VariantConfig, variant_term
from ssmax.model.cache import KVCache
from ssmax.model.positions import YARN_PARAMS, rope_frequencies, yarn_frequencies
from ssmax.model.rotary import rope_angles


@dataclass
class ModelConfig:
    """The `model` config group (conf/model/*.yaml; schema: ssmax.config.schema)."""

    name: str = "tiny"  # the option's name (a preset names the one it expects)
    vocab_size: int = field(default=50257, metadata={"gt": 0})  # config: ${data.vocab_size}
    n_layers: int = field(default=12, metadata={"gt": 0})  # decoder blocks
    n_heads: int = field(default=12, metadata={"gt": 0})  # attention heads per block
    dim: int = field(default=768, metadata={"gt": 0})  # hidden size (n_heads x head_dim)
    ffn_dim: int = field(default=2048, metadata={"gt": 0})  # SwiGLU hidden size
    rope_theta: float = field(default=10_000.0, metadata={"gt": 0})  # Sec. 3 / App. B
    norm_eps: float = field(default=1.0e-5, metadata={"gt": 0})  # paper silent: Llama 2's
    init_std: float = field(default=0.02, metadata={"gt": 0})  # paper silent: N(0, 0.02)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.to(x.dtype) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, variant: VariantConfig, train_len: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg.dim, cfg.n_heads, variant, train_len)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn = SwiGLU(cfg.dim, cfg.ffn_dim)

    def forward(self, x, cos, sin, term, cache, layer):  # noqa: ANN001, ANN201
        x = x + self.attn(self.attn_norm(x), cos, sin, term, cache, layer)
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    """Decoder-only LM. ``train_len`` is the training sequence length N: it sizes p_n and
    sets the (e)/(f) init of s; inference runs at any length."""

    def __init__(self, cfg: ModelConfig, variant: VariantConfig, train_len: int) -> None:
        super().__init__()
        self.cfg, self.variant, self.train_len = cfg, variant, train_len
        self.rope_theta = float(cfg.rope_theta)
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, variant, train_len) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if variant.scale == "p_n":  # shared by all layers and heads (Eq. 3)
            self.p_n = nn.Parameter(torch.full((train_len,), float(variant.pn_init)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Paper silent on init: N(0, init_std) for every matrix and embedding (GPT-2/Llama habit).
        for module in self.modules():  # meta weights (count_parameters) hold nothing to set
            if isinstance(module, nn.Linear | nn.Embedding) and not module.weight.is_meta:
                nn.init.normal_(module.weight, std=self.cfg.init_std)
            sink = getattr(module, "sink", None)  # issue 60: transformers' GptOss, N(0, std)
            if isinstance(sink, nn.Parameter) and not sink.is_meta:
                nn.init.normal_(sink, std=self.cfg.init_std)

    @property
    def head_dim(self) -> int:
        return self.cfg.dim // self.cfg.n_heads

    def new_cache(self, batch: int, max_len: int, dtype: torch.dtype | None = None) -> KVCache:
        """An empty KV cache; dtype: the weights' unless given (bf16 under CUDA autocast, where
        keys and values come out of the projections in bf16)."""
        weight = self.tok_emb.weight
        return KVCache(
            self.cfg.n_layers,
            batch,
            self.cfg.n_heads,
            self.head_dim,
            max_len,
            device=weight.device,
            dtype=dtype or weight.dtype,
        )

    def rope(
        self, positions: torch.Tensor, length: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin at these positions: RoPE at the model's theta, or the variant's p-RoPE
        (positions.rope_frequencies; its base scaled as theta is, by rope_theta / the trained one),
        or YaRN's interpolation by s = max(1, length / N) (variant.rope_scaling; length: the
        forward pass's, default the last position + 1). Under variant.rope_scaled_at_eval=false
        the evals' theta factor (ssmax.evals.scaled_rope_theta) does not reach them."""
        v = self.variant
        theta = self.rope_theta if v.rope_scaled_at_eval else float(self.cfg.rope_theta)
        if v.rope_scaling == "yarn_dynamic":
            length = int(positions[-1]) + 1 if length is None else length
            freqs = yarn_frequencies(
                self.head_dim, theta, scale=max(1.0, length / self.train_len),
                train_len=self.train_len, device=positions.device,
                **{name: getattr(v, name) for name in YARN_PARAMS},
            )  # fmt: skip
            return rope_angles(positions, self.head_dim, theta, freqs=freqs)
        if v.rope_fraction == 1 and v.rope_base is None:
            return rope_angles(positions, self.head_dim, theta)
        freqs = rope_frequencies(
            self.head_dim, theta, rope_fraction=v.rope_fraction,
            rope_base=v.rope_base, theta_scale=theta / float(self.cfg.rope_theta),
            device=positions.device,
        )  # fmt: skip
        return rope_angles(positions, self.head_dim, theta, freqs=freqs)

    def hidden(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Final normalised hidden states [B, T, dim]; with a cache, input_ids continue it."""
        t = input_ids.shape[1]
        past = cache.length if cache is not None else 0
        positions = torch.arange(past, past + t, device=input_ids.device)
        if self.variant.rope_scaling != "none":  # the frequencies of this pass, for every key
            keys = torch.arange(past + t, device=input_ids.device)
            cos, sin = self.rope(keys, length=past + t)
        else:
            cos, sin = self.rope(positions)
        # n: the keys each query sees under the causal mask, or (law_n pass: YaRN's dynamic
        # scaling) the pass's length for every query
        whole = self.variant.law_n == "pass"
        n = torch.full_like(positions, past + t) if whole else positions + 1
        term = variant_term(self.variant, n, getattr(self, "p_n", None), self.train_len)
        x = self.tok_emb(input_ids)
        for i, block in enumerate(self.layers):
            x = block(x, cos, sin, term, cache, i)
        if cache is not None:
            cache.advance(t)
        return self.norm(x)

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits [B, T, vocab]."""
        return self.lm_head(self.hidden(input_ids, cache))


_COUNTS: dict[tuple[str, str, int], int] = {}


def count_parameters(cfg: ModelConfig, variant: VariantConfig, train_len: int) -> int:
    """Parameter count without allocating weights (built on the meta device), once per model:
    `plan` counts each node's at each eval context (measured: docs/pipeline.md, "Measured")."""
    key = (repr(cfg), repr(variant), train_len)
    if key not in _COUNTS:
        with torch.device("meta"):
            model = Transformer(cfg, variant, train_len)
        _COUNTS[key] = sum(p.numel() for p in model.parameters())
    return _COUNTS[key]


VARIANT_PARAMS = ("attn.s", "attn.b", "p_n")


def load_backbone(model: Transformer, state_dict: dict[str, torch.Tensor]) -> None:
    """Load another variant's weights (e.g. a softmax checkpoint into SSMax for (e)/(f)).

    Every weight must match; only the variant's own scalars (s, b, p_n) may be absent, and
    they keep their init. A softmax model given SSMax weights drops s and b: refused.
    """
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    bad_missing = [k for k in missing if not k.endswith(VARIANT_PARAMS)]
    if bad_missing or unexpected:
        raise ValueError(
            f"checkpoint does not fit model: missing {bad_missing[:4]}, unexpected {unexpected[:4]}"
        )
