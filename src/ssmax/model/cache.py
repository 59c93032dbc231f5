"""A preallocated key/value cache for greedy decoding at long context."""

from __future__ import annotations

import torch


class KVCache:
    """Keys and values of every layer, [B, H, max_len, D] each, filled left to right.

    ``length`` (tokens held, the same in every layer) is one attribute that the model advances
    once per forward pass, after every layer has written (Transformer.hidden): layers write with
    ``update`` and change no Python state, so a compiled forward does not guard on the layer.
    """

    def __init__(
        self,
        n_layers: int,
        batch: int,
        n_heads: int,
        head_dim: int,
        max_len: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (batch, n_heads, max_len, head_dim)
        self.k = [torch.empty(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.empty(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.length = 0
        self.max_len = max_len

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [B, H, t, D] after the ``length`` held tokens; return this layer's keys
        and values up to and including them (``advance`` then counts them as held)."""
        start, t = self.length, k.shape[2]
        if start + t > self.max_len:
            raise ValueError(f"KV cache full: {start} + {t} tokens > max_len={self.max_len}")
        self.k[layer][:, :, start : start + t] = k
        self.v[layer][:, :, start : start + t] = v
        return self.k[layer][:, :, : start + t], self.v[layer][:, :, : start + t]

    def advance(self, t: int) -> None:
        """Count the t tokens every layer has just written as held."""
        self.length += t
