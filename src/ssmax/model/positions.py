"""Where a token's position enters attention, written once beside the laws (laws.py): the
rotary frequencies of p-RoPE and of YaRN's interpolation, and NAPE's ALiBi slopes. Their
parameters are variant fields of the same name (ROPE_PARAMS, YARN_PARAMS; config.json's
ssmax_<name>).

Plain torch and no project imports, like laws.py: this project's model uses it
(ssmax.model.attention, ssmax.model.transformer), and the export copies this file beside
modeling_ssmax.py, which imports it as `.positions`, into every exported folder
(ssmax.export.folder):

    rope_frequencies    p-RoPE: only a fraction of the rotary frequencies turn
    nape_slopes  NAPE (ASEntmax's positions): the first half of the heads ALiBi, -slope_h * t
                 added to each score (slopes 1, 1/2, ...), the other half NoPE; no rotation
    yarn_frequencies    YaRN's NTK-by-parts interpolation of the rotary frequencies by s
"""

from __future__ import annotations

import math

import torch

# ---------------------------------------------------------------- p-RoPE
ROPE_PARAMS = ("rope_fraction", "rope_base")


def rope_frequencies(
    head_dim: int,
    theta: float,
    *,
    rope_fraction: float = 1.0,
    rope_base: float | None = None,
    theta_scale: float = 1.0,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The angular frequency of each rotary pair j < head_dim / 2 (pairs (j, j + d/2)), float64.

    rope_fraction 1 and rope_base None: RoPE's theta^(-2j/d). Else p-RoPE (Barbero et al. 2024):
    only the first K = round(fraction * d / 2) (the highest) turn, the rest are 0 (not rotated);
    their spacing theta^(-2j/d) (rope_base None), or, as modded-nanogpt writes the effective base
    that scale-invariant attention used (1024), (rope_base * theta_scale)^(-j / (K - 1)), j < K.
    theta_scale: the factor theta was scaled by (the evals' x50), applied to the base as well."""
    half = head_dim // 2
    j = torch.arange(half, dtype=torch.float64, device=device)
    if rope_base is None:
        freq = theta ** (-2 * j / head_dim)
    else:
        kept = max(round(rope_fraction * half), 1)
        freq = (rope_base * theta_scale) ** (-j / max(kept - 1, 1))
    if rope_fraction < 1:
        kept = max(round(rope_fraction * half), 1)
        freq = torch.where(j < kept, freq, torch.zeros_like(freq))
    return freq


# ---------------------------------------------------------------- NAPE (ASEntmax's positions)
def nape_slopes(n_heads: int, device: torch.device | str | None = None) -> torch.Tensor:
    """NAPE's ALiBi slope of each head, float32 (Vasylenko et al. 2026; deep-spin/asentmax,
    get_nape_slopes with its defaults, alibi_num_heads = H // 2, slope_type "linear"): the
    first H // 2 heads 1, 1/2, ..., 1/(H // 2); the other heads NoPE, slope 0. No head is
    rotated; the length law's factor multiplies the NoPE heads only (nape_scaled)."""
    alibi = n_heads // 2
    h = torch.arange(n_heads, dtype=torch.float32, device=device)
    return torch.where(h < alibi, 1.0 / (h + 1), torch.zeros_like(h))


def nape_scaled(n_heads: int) -> int:
    """How many heads, the last ones (NAPE's NoPE heads), the length law's factor multiplies."""
    return n_heads - n_heads // 2


# ---------------------------------------------------------------- YaRN's interpolation
YARN_PARAMS = ("yarn_beta_fast", "yarn_beta_slow", "yarn_ramp")
YARN_RAMPS = ("index", "ratio")


def yarn_frequencies(
    head_dim: int,
    theta: float,
    *,
    scale: float | torch.Tensor,
    train_len: int,
    yarn_beta_fast: float = 32.0,
    yarn_beta_slow: float = 1.0,
    yarn_ramp: str = "index",
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """YaRN's "NTK-by-parts" frequency of each rotary pair j < head_dim / 2, float64 (Peng et
    al. 2023, Sec. 3.2): h(theta_j) = (1 - gamma_j) theta_j / s + gamma_j theta_j, theta_j =
    theta^(-2j/d); gamma_j 1 keeps a pair (no interpolation), 0 divides it by s (position
    interpolation). ``yarn_ramp``:

    index  the authors' code (jquesnelle/yarn, find_correction_range) and transformers'
           _compute_yarn_parameters (truncate, its default): gamma_j = 1 - clamp((j - lo) /
           (hi - lo), 0, 1), lo = floor(d(beta_fast)), hi = ceil(d(beta_slow)) clamped to
           [0, d - 1], d(r) = d ln(N / (2 pi r)) / (2 ln theta) the pair whose wavelength fits
           r times in N
    ratio  the paper's Sec. 3.2: gamma_j = clamp((r_j - alpha) / (beta - alpha), 0, 1), r_j =
           N / lambda_j = N theta_j / (2 pi), alpha = beta_slow, beta = beta_fast

    s = 1 gives RoPE's frequencies."""
    half = head_dim // 2
    j = torch.arange(half, dtype=torch.float64, device=device)
    extrapolated = theta ** (-2 * j / head_dim)
    interpolated = extrapolated / scale
    if yarn_ramp == "index":

        def pair(rotations: float) -> float:
            return head_dim * math.log(train_len / (rotations * 2 * math.pi)) / (
                2 * math.log(theta))  # fmt: skip

        lo = max(math.floor(pair(yarn_beta_fast)), 0)
        hi = min(math.ceil(pair(yarn_beta_slow)), head_dim - 1)
        if lo == hi:
            hi += 0.001  # transformers' and the authors' guard against 0 / 0
        keep = 1 - ((j - lo) / (hi - lo)).clamp(0, 1)
    elif yarn_ramp == "ratio":
        r = train_len * extrapolated / (2 * math.pi)
        keep = ((r - yarn_beta_slow) / (yarn_beta_fast - yarn_beta_slow)).clamp(0, 1)
    else:
        raise ValueError(f"yarn_ramp={yarn_ramp!r}; allowed: {', '.join(YARN_RAMPS)}")
    return interpolated * (1 - keep) + extrapolated * keep
