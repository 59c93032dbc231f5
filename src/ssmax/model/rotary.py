"""Rotary position embedding (Su et al., 2024) with angles computed in float32.

Pairs are (x_j, x_{j + d/2}) ("rotate half"), rotated by angle pos * theta^(-2j/d).
"""

from __future__ import annotations

import torch


def rope_angles(
    positions: torch.Tensor, head_dim: int, theta: float, freqs: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape [T, head_dim] for integer positions, in float32; freqs: the pairs'
    angular frequencies (float64, p-RoPE's: positions.rope_frequencies) in place of theta^(-2j/d).

    Built on the positions' device: a host tensor copied in would make every eager forward
    wait for the device (a blocking copy), one decoding step at a time."""
    if freqs is None:
        steps = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device)
        inv_freq = theta ** (-steps / head_dim)
    else:
        inv_freq = freqs.to(torch.float64)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, H, T, D] by per-position angles; the product is taken in float32."""
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)
