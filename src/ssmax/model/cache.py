"""A preallocated key/value cache for greedy decoding at long context."""

from __future__ import annotations

import torch


class KVCache:
    """Keys and values of every layer, [B, H, max_len, D] each, filled left to right."""

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
        self.lengths = [0] * n_layers
        self.max_len = max_len

    def length(self, layer: int) -> int:
        return self.lengths[layer]

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v [B, H, t, D]; return every cached key and value of this layer."""
        start, t = self.lengths[layer], k.shape[2]
        if start + t > self.max_len:
            raise ValueError(f"KV cache full: {start} + {t} tokens > max_len={self.max_len}")
        self.k[layer][:, :, start : start + t] = k
        self.v[layer][:, :, start : start + t] = v
        self.lengths[layer] = start + t
        return self.k[layer][:, :, : start + t], self.v[layer][:, :, : start + t]
