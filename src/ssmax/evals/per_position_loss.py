"""Per-position test loss at long context (Sec. 3.2, Fig. 5).

The paper runs 100,000 test sequences of length 20,000 (about 20x the training length 1024)
through each model with RoPE theta x50 and plots the loss at each position, averaged over the
sequences. Here every sequence gets one full-context forward pass; the vocabulary projection and
cross-entropy are taken in chunks of positions from the final hidden states, so no [L, vocab]
logits tensor exists and memory stays linear in L (attention runs in the fused SDPA kernel,
which never builds the L x L matrix for a causal mask without an explicit mask tensor).

Loss index t is the loss of predicting token t+1 from a context of t+1 tokens.

Summaries (paper silent; Fig. 5 only shows smoothed curves): ``loss_at_multiples`` gives, for a
multiple k of the training length N, the mean loss over the contexts of length in ((k-1)N, kN],
i.e. the last N positions up to kN; ``smooth`` is a centred moving average for plotting.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ssmax.evals.common import device_autocast, model_device
from ssmax.model import Transformer

DEFAULT_CHUNK = 1024  # positions per vocabulary projection: [chunk, vocab] logits at a time


@torch.no_grad()
def per_position_loss(
    model: Transformer, sequences: torch.Tensor, chunk: int = DEFAULT_CHUNK, batch_size: int = 1
) -> torch.Tensor:
    """Mean next-token loss per position, float64 [L-1], over ``sequences`` LongTensor [N, L]."""
    if sequences.ndim != 2 or sequences.shape[1] < 2:
        raise ValueError(f"sequences must be [N, L] with L >= 2, got {tuple(sequences.shape)}")
    was_training = model.training
    model.eval()
    device = model_device(model)
    n, length = sequences.shape
    total = torch.zeros(length - 1, dtype=torch.float64, device=device)
    try:
        with device_autocast(model):  # bf16 on a GPU; the CPU path is unchanged
            for start in range(0, n, batch_size):
                total += _summed_losses(
                    model, sequences[start : start + batch_size].to(device), chunk
                )
    finally:
        model.train(was_training)
    return (total / n).cpu()


def _summed_losses(model: Transformer, ids: torch.Tensor, chunk: int) -> torch.Tensor:
    """Next-token losses [L-1] of a batch [b, L], summed over its sequences, float64."""
    length = ids.shape[1]
    hidden = model.hidden(ids[:, :-1])  # [b, L-1, dim]: the only full-length activation
    out = torch.empty(length - 1, dtype=torch.float64, device=ids.device)
    for a in range(0, length - 1, chunk):
        b = min(a + chunk, length - 1)
        logits = model.lm_head(hidden[:, a:b])
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 -> fp32
        loss = F.cross_entropy(logits.transpose(1, 2), ids[:, a + 1 : b + 1], reduction="none")
        out[a:b] = loss.double().sum(0)
    return out


def loss_at_multiples(
    losses: torch.Tensor, train_len: int, multiples: Sequence[int] = (1, 5, 10, 20)
) -> dict[int, float]:
    """Mean loss over contexts of length in ((k-1)N, kN] for each multiple k that fits."""
    out = {}
    for k in multiples:
        lo, hi = (k - 1) * train_len, min(k * train_len, losses.numel())
        if lo < hi:  # context length c = index + 1, so c in (lo, hi] is index [lo, hi)
            out[k] = losses[lo:hi].mean().item()
    return out
