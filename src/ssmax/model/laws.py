"""Every attention length law, written once: the per-position term of the factor m_i that
multiplies the query (softmax(m_i q_i K^T / sqrt(d)), Sec. 2.3, Eq. 11), m_i = s * term + b.

Plain torch and no project imports: this project's model uses it (ssmax.model.attention), and
the export copies this file beside modeling_ssmax.py, which imports it as `.laws`, into every
exported folder (ssmax.export.folder). n is the number of keys a query sees (position + 1 under
the causal mask), N = train_len the training length:

    log_n        log n                                  (b)-(f): SSMax, Eq. 2 (+ b: Eq. 4)
    p_n          p_min(n, N)                            Sec. 2.1's rationale model, Eq. 3
    qwen_log_n   max(1, log n / log N)                  Qwen's log-n scaling
    llama4       1 + beta log(1 + floor(n / (floor_scale N)))   Llama 4's attention temperature
    sqrt_log_n   sqrt(log n)                            a slower-growing law

    yarn         (0.1 ln s + 1)^mscale_power, s = max(1, n / N)   YaRN's attention temperature
    asentmax     log(n + 1)                             ASEntmax's length term (ADAPTIVE below)

A law is a function (n, *, train_len, p_n, <PARAMS>) -> term, n and term float32; softmax
("none") has no term. A law's own parameter (like beta) is a field of the same name of the
variant config (ssmax.model.VariantConfig) and `ssmax_<name>` in an exported config.json: list
it in PARAMS.

Beyond a factor on the query (issue 43), the general path (``attention``: explicit scores,
transform, normaliser, weights @ V; the model's FlexAttention path calls ``score_mod``):

    ADAPTIVE     laws whose factor reads the layer's input h_i: m_i = f(term_i, w_b h_i, w_g h_i)
      asentmax   delta + softplus(w_b h_i + c_b) * log(n_i + 1)^(gamma_max tanh(w_g h_i + c_g))
    SCORE_LAWS   a transform of each query-key score S_ij by the distance t = i - j >= 0
      scale_invariant   a_t S + m_t, a_t = sqrt(2 log(1 + t / tau) + 1), m_t = -2 log(1 + t / tau)
    NORMALIZERS  softmax, or alpha-entmax (``entmax``: bisection, closed-form gradient)

Their parameters are variant fields too: SCORE_PARAMS, NORMALIZER_PARAMS, ADAPTIVE_PARAMS
(config.json's ssmax_<name>).

p-RoPE, NAPE's slopes and YaRN's interpolation are positions.py's (ssmax.model.positions).

A length law's n is, per variant (its law_n), the keys each query sees (n_i = i + 1, the
paper's), or the forward pass's length L for every query of the pass (YaRN's dynamic scaling:
one s = max(1, L / N) a pass; under a KV cache, the cache length with the pass's tokens).

Issue 60's arms, each a law of its own beside the above (docs/rival-laws.md):

    NORMALIZERS  also ``adaptive_temperature``: softmax(beta z), beta = max(1, poly(H)) where the
                 entropy H of softmax(z) exceeds 0.5 (Velickovic et al., "softmax is not enough")
    SINK         a learned logit per head in the softmax's denominator, with no value (gpt-oss):
                 ``attention_weights(sink=...)``, or fused through SDPA: ``sink_attention``
    GATES        after attention: ``elementwise``, Y' = Y * sigmoid(X W) (gated attention)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

# the laws' parameters besides s, b, N and p_n: variant fields, config.json's ssmax_<name>
PARAMS = ("beta", "floor_scale", "mscale_power")


def log_n(n: torch.Tensor, **_: object) -> torch.Tensor:
    return torch.log(n)


def p_n(n: torch.Tensor, *, p_n: torch.Tensor | None, **_: object) -> torch.Tensor:
    """p_n is defined for n = 1..N only; past the training length it is held at p_N (the
    rationale model is only read for Fig. 2, never evaluated at long context)."""
    if p_n is None:
        raise ValueError("law p_n needs the shared p_n table")
    return p_n.float()[(n.clamp(1, p_n.numel()) - 1).long()]


def qwen_log_n(n: torch.Tensor, *, train_len: int, **_: object) -> torch.Tensor:
    return (torch.log(n) / math.log(train_len)).clamp(min=1.0)


def llama4(
    n: torch.Tensor, *, train_len: int, beta: float, floor_scale: float, **_: object
) -> torch.Tensor:
    steps = torch.floor(n / (floor_scale * train_len))
    return 1.0 + beta * torch.log1p(steps)


def sqrt_log_n(n: torch.Tensor, **_: object) -> torch.Tensor:
    return torch.sqrt(torch.log(n))


def yarn(n: torch.Tensor, *, train_len: int, mscale_power: float, **_: object) -> torch.Tensor:
    """YaRN (Peng et al. 2023, Sec. 3.4): softmax(q k / (t sqrt(d))) with sqrt(1/t) = 0.1 ln s + 1,
    so 1/t = (0.1 ln s + 1)^2 (mscale_power 2); s = max(1, n / N), the context the query sees
    over the training length (YaRN's dynamic scaling, Sec. 3.3): 1 up to N."""
    s = (n / train_len).clamp(min=1.0)
    return (0.1 * torch.log(s) + 1.0) ** mscale_power


def log_n_plus_1(n: torch.Tensor, **_: object) -> torch.Tensor:
    """ASEntmax's length term log(n + 1) (its code's log of position + 2), combined with the
    layer's input by ADAPTIVE["asentmax"]."""
    return torch.log(n + 1.0)


LAWS: dict[str, Callable[..., torch.Tensor]] = {
    "log_n": log_n, "p_n": p_n, "qwen_log_n": qwen_log_n, "llama4": llama4,
    "sqrt_log_n": sqrt_log_n, "yarn": yarn, "asentmax": log_n_plus_1,
}  # fmt: skip


def length_term(
    law: str,
    n: torch.Tensor,
    *,
    train_len: int,
    p_n: torch.Tensor | None = None,
    **params: float,
) -> torch.Tensor | None:
    """The law's term for key counts n (any shape), float32; None for softmax ("none")."""
    if law == "none":
        return None
    if law not in LAWS:
        raise ValueError(f"law={law!r}; allowed: none, {', '.join(LAWS)}")
    return LAWS[law](n.float(), train_len=train_len, p_n=p_n, **params)


# ---------------------------------------------------------------- factors that read the input
def asentmax(
    term: torch.Tensor,
    beta_logit: torch.Tensor,
    gamma_logit: torch.Tensor,
    *,
    delta: float,
    gamma_max: float,
) -> torch.Tensor:
    """ASEntmax's query factor (Vasylenko et al. 2026; deep-spin/asentmax, "adapt-softplus-tanh"):
    delta + softplus(beta_logit) * term^(gamma_max * tanh(gamma_logit)), term = log(n + 1) and
    the logits w h_i + c per head from the layer's input; any shape that broadcasts; float32
    at least (float64 logits stay float64)."""
    dtype = torch.promote_types(beta_logit.dtype, torch.float32)
    beta = torch.nn.functional.softplus(beta_logit.to(dtype))
    gamma = gamma_max * torch.tanh(gamma_logit.to(dtype))
    return delta + beta * term.to(dtype) ** gamma


ADAPTIVE: dict[str, Callable[..., torch.Tensor]] = {"asentmax": asentmax}
ADAPTIVE_PARAMS = ("delta", "gamma_max")


# ---------------------------------------------------------------- transforms of each score
def scale_invariant(score: torch.Tensor, t: torch.Tensor, *, tau: float) -> torch.Tensor:
    """Scale-invariant attention (Anson, Wang, Aitchison 2025, Eq. 14, 16): L_t = a_t S_t + m_t,
    a_t^2 = 2 [log(t / tau + 1) - log alpha + beta / alpha], m_t = -a_t^2 + beta / alpha, with
    the paper's boundary a_0^2 = 1, m_0 = 0 (alpha = beta = e^0.5): a_t = sqrt(2 log(1 + t/tau)
    + 1), m_t = -2 log(1 + t / tau). t >= 0: how many tokens back the key is (0: itself)."""
    ell = torch.log1p(t / tau)
    return torch.sqrt(2.0 * ell + 1.0) * score - 2.0 * ell


SCORE_LAWS: dict[str, Callable[..., torch.Tensor]] = {"scale_invariant": scale_invariant}
SCORE_PARAMS = ("tau",)


# ---------------------------------------------------------------- normalisers
ENTMAX_ITERS = 50  # bisection steps: the bracket (< 1 wide) shrinks below float64's resolution


class _Entmax(torch.autograd.Function):
    """alpha-entmax over the last dimension (Peters, Niculae, Martins 2019): p_i =
    [(alpha - 1) z_i - tau]_+ ^ (1 / (alpha - 1)), tau found by bisection so that sum p = 1;
    -inf (masked) entries get 0. Gradient in closed form: with g_i = p_i^(2 - alpha) on the
    support, dz = g dp - g (g . dp) / sum g."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, alpha: float) -> torch.Tensor:  # noqa: ANN001
        x = z * (alpha - 1.0)
        power = 1.0 / (alpha - 1.0)
        top = x.max(dim=-1, keepdim=True).values
        lo = top - 1.0  # sum p >= 1 here (the top entry alone gives 1)
        hi = top - (1.0 / z.shape[-1]) ** (alpha - 1.0)  # sum p <= 1 here (each <= 1 / d)
        buf = torch.empty_like(x)  # in place: the same bits as fresh tensors, far fewer pages
        for _ in range(ENTMAX_ITERS):
            mid = (lo + hi) / 2
            torch.sub(x, mid, out=buf)
            total = buf.clamp_(min=0).pow_(power).sum(dim=-1, keepdim=True)
            above = total >= 1
            lo = torch.where(above, mid, lo)
            hi = torch.where(above, hi, mid)
        p = (x - (lo + hi) / 2).clamp(min=0) ** power
        p = p / p.sum(dim=-1, keepdim=True)
        ctx.save_for_backward(p)
        ctx.alpha = alpha
        return p

    @staticmethod
    def backward(ctx, dp: torch.Tensor) -> tuple[torch.Tensor, None]:  # noqa: ANN001
        (p,) = ctx.saved_tensors
        g = torch.where(p > 0, p ** (2.0 - ctx.alpha), torch.zeros_like(p))
        gdp = g * dp
        return gdp - g * gdp.sum(-1, keepdim=True) / g.sum(-1, keepdim=True), None


def entmax(z: torch.Tensor, *, alpha: float, **_: object) -> torch.Tensor:
    """alpha-entmax over the last dimension (alpha > 1; alpha -> 1 is softmax)."""
    if not alpha > 1:
        raise ValueError(f"alpha={alpha}; allowed: a number > 1")
    return _Entmax.apply(z, float(alpha))


def softmax(z: torch.Tensor, **_: object) -> torch.Tensor:
    return torch.softmax(z, dim=-1)


# "softmax is not enough" (Velickovic, Perivolaropoulos, Barbero, Pascanu; arXiv 2410.01104, Fig. 4
# of its ICML 2025 version, Fig. 5 of v2): the polynomial fit of the inverse temperature beta to
# the entropy, highest degree first (jnp.polyval's order), and the entropy above which it applies
ADAPTIVE_TEMPERATURE_POLY = (-0.037, 0.481, -2.3, 4.917, -1.791)
ADAPTIVE_TEMPERATURE_MIN_ENTROPY = 0.5


def adaptive_temperature(z: torch.Tensor, **_: object) -> torch.Tensor:
    """Adaptive temperature (the paper's JAX code, Fig. 4): p = softmax(z); H = -sum p log(p +
    1e-9), the Shannon entropy of each row (nats); beta = max(poly(H), 1) where H > 0.5, else 1
    ("don't overcorrect low-entropy heads", "never increase entropy"); softmax(z * beta). Masked
    (-inf) entries stay -inf (beta >= 1) and count 0 in H. Each row alone: causal, and the same
    one query at a time under a KV cache."""
    p = torch.softmax(z, dim=-1)
    entropy = -(p * torch.log(p + 1e-9)).sum(dim=-1, keepdim=True)
    poly = torch.zeros_like(entropy)
    for coefficient in ADAPTIVE_TEMPERATURE_POLY:  # Horner, highest degree first
        poly = poly * entropy + coefficient
    beta = torch.where(entropy > ADAPTIVE_TEMPERATURE_MIN_ENTROPY, poly.clamp(min=1.0), 1.0)
    masked = torch.isneginf(z)  # -inf * beta, but with a gradient (0 * -inf would be NaN)
    return torch.softmax((z.masked_fill(masked, 0.0) * beta).masked_fill(masked, -math.inf), -1)


NORMALIZERS: dict[str, Callable[..., torch.Tensor]] = {
    "softmax": softmax, "entmax": entmax, "adaptive_temperature": adaptive_temperature,
}  # fmt: skip
NORMALIZER_PARAMS = ("alpha",)


# ---------------------------------------------------------------- the general path
def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    past: int,
    score_law: str = "none",
    normalizer: str = "softmax",
    keep: torch.Tensor | None = None,
    alibi: torch.Tensor | None = None,
    sink: torch.Tensor | None = None,
    **params: float,
) -> torch.Tensor:
    """Causal attention weights [..., T, past + T] of queries [..., T, D] at positions past ..
    past + T - 1 over keys [..., past + T, D] at 0 .. past + T - 1: scores q k / sqrt(d) (at
    least float32), the score law on each by its distance t = i - j, ALiBi's -alibi_h * t
    (``alibi``: one slope per head, the heads the third axis from the end; 0: none), the future
    masked (-inf) and where ``keep`` (bool, broadcast to the scores) is False (padding), then
    the normaliser. q carries its factor m_i already. ``sink`` [H] (the heads: dim -3 of q): a
    logit per head that joins each row as one more entry, never masked, normalised with the
    rest and then dropped (gpt-oss's sinks; it has no value): the weights sum to less than 1.
    ALiBi and the sink compose: the sink's entry has no distance, so no ALiBi term."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)).to(dtype)  # (bf16 under autocast)
    scores = scores * (1.0 / math.sqrt(q.shape[-1]))
    t_len, k_len = q.shape[-2], k.shape[-2]
    t = (torch.arange(past, past + t_len, device=q.device)[:, None]
         - torch.arange(k_len, device=q.device)[None, :])  # fmt: skip
    if score_law != "none":  # t clamped: no NaN behind the mask, where a gradient would meet it
        scores = SCORE_LAWS[score_law](
            scores, t.clamp(min=0).to(dtype), **_only(params, SCORE_PARAMS)
        )
    if alibi is not None:  # NAPE's ALiBi heads (positions.nape_slopes; 0: NoPE)
        scores = scores - alibi.to(dtype)[:, None, None] * t.clamp(min=0).to(dtype)
    drop = t < 0 if keep is None else (t < 0) | ~keep
    scores = scores.masked_fill(drop, float("-inf"))
    if sink is not None:  # one more entry per row: the head's sink logit, as it is (unscaled)
        column = sink.to(dtype)[:, None, None].expand(*scores.shape[:-1], 1)
        scores = torch.cat([scores, column], dim=-1)
    weights = NORMALIZERS[normalizer](scores, **_only(params, NORMALIZER_PARAMS))
    if sink is not None:
        weights = weights[..., :-1]
    if keep is not None:  # a padding query that keeps no key: weights 0, not NaN
        weights = torch.where(drop.all(-1, keepdim=True), 0.0, weights)
    return weights


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    past: int,
    block: int = 1024,
    **law: object,
) -> torch.Tensor:
    """The general path: attention_weights @ V, queries in blocks of ``block`` (the weights of
    one block at a time), the result in v's dtype. q [..., T, D], k and v [..., past + T, D]."""
    outs, keep = [], law.pop("keep", None)
    for start in range(0, q.shape[-2], block):
        rows = keep if keep is None or keep.shape[-2] == 1 else keep[..., start : start + block, :]
        w = attention_weights(
            q[..., start : start + block, :], k, past=past + start, keep=rows, **law
        )
        outs.append(w.to(v.dtype) @ v)
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)


def sink_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sink: torch.Tensor, *, past: int
) -> torch.Tensor:
    """Causal softmax attention with a sink logit per head, through the fused
    F.scaled_dot_product_attention: attention_weights(q, k, past=past, sink=sink) @ v. q
    [B, H, T, D] (its factor m_i applied), k and v [B, H, past + T, D], sink [H].

    The sink is one more key, in front of the others, with value 0 and score sink_h: every key
    gets one more coordinate, 0, the sink's key is (0, ..., 0, sink_h) and every query gets
    sqrt(D) there, so that its score q k / sqrt(D) (SDPA's scale kept at 1 / sqrt(D), not of
    D + 1) is sink_h exactly, whatever the query's factor. The mask: one token sees the sink and
    every key; a prefill (past = 0) puts a query of zeros in front, so that queries and keys are
    square and is_causal (top-left) lets query i see the sink and keys 0..i (the flash kernels
    run); its output is dropped; a chunk after a cache sees the sink, the past and its own keys
    causally (a boolean mask)."""
    b, h, t, d = q.shape
    root = math.sqrt(d)
    q1 = torch.cat([q, q.new_full((b, h, t, 1), root)], dim=-1)
    k1 = torch.cat([k, k.new_zeros((b, h, k.shape[-2], 1))], dim=-1)
    sink_key = torch.cat([k.new_zeros((h, d)), sink.to(k.dtype)[:, None]], dim=-1)
    k1 = torch.cat([sink_key[None, :, None, :].expand(b, h, 1, d + 1), k1], dim=-2)
    v1 = torch.cat([v.new_zeros((b, h, 1, v.shape[-1])), v], dim=-2)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if t == 1:  # (plain Python branches, as the model's own: a compiled forward guards on them)
        return sdpa(q1, k1, v1, scale=1.0 / root)
    if past == 0:
        q1 = torch.cat([q1.new_zeros((b, h, 1, d + 1)), q1], dim=-2)
        return sdpa(q1, k1, v1, is_causal=True, scale=1.0 / root)[:, :, 1:]
    keep = torch.ones(t, past + t + 1, dtype=torch.bool, device=q.device).tril(past + 1)
    return sdpa(q1, k1, v1, attn_mask=keep, scale=1.0 / root)


# ---------------------------------------------------------------- after attention: the gate
def elementwise_sigmoid(y: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Gated attention's best form (Qiu et al., NeurIPS 2025, arXiv 2505.06708): Y' = Y *
    sigmoid(X W_theta) at G1, the attention's output (heads concatenated, before the output
    projection), one gate per channel of each head, logits = X W_theta from the layer's
    normalised input (the authors' elementwise_attn_output_gate; Qwen3-Next's gate)."""
    return y * torch.sigmoid(logits)


GATES: dict[str, Callable[..., torch.Tensor]] = {"elementwise": elementwise_sigmoid}


def score_mod(
    score_law: str,
    past: int | torch.Tensor,
    device: torch.device,
    alibi: torch.Tensor | None = None,
    **params: float,
) -> Callable[..., torch.Tensor]:
    """The same score law, ALiBi slopes (per head) and causal mask as a FlexAttention score_mod
    (query index q_idx is at position past + q_idx). The law's parameters are captured as 0-d
    tensors on ``device``: flex_attention takes tensors and ints from its closure, not floats,
    and a compile with dynamic shapes makes a float attribute a symbolic float."""
    law = SCORE_LAWS.get(score_law)
    mine = {k: torch.tensor(v, device=device) for k, v in _only(params, SCORE_PARAMS).items()}

    def mod(score, b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202
        t = q_idx + past - kv_idx
        if law is not None:
            score = law(score, t.clamp(min=0).to(score.dtype), **mine)
        if alibi is not None:
            score = score - alibi[h].to(score.dtype) * t.clamp(min=0).to(score.dtype)
        return torch.where(t >= 0, score, float("-inf"))

    return mod


def _only(params: dict[str, object], names: tuple[str, ...]) -> dict[str, object]:
    return {k: v for k, v in params.items() if k in names}
