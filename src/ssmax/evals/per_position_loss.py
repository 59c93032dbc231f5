"""Per-position test loss at long context (Sec. 3.2, Fig. 5).

The paper runs 100,000 test sequences of length 20,000 (about 20x the training length 1024)
through each model with RoPE theta x50 and plots the loss at each position, averaged over the
sequences. Here the sequences stream in (the paper's 100,000 x 20,001 ids would be 16 GB at once)
and go through the model ``batch_size`` at a time: one full-context forward pass per batch, then
the LM head and cross-entropy over chunks of rows (ssmax.model.loss.token_losses: [rows, vocab],
never the [batch, vocab, positions] layout, whose spatial softmax is slow on a GPU), so no
[L, vocab] logits tensor exists and memory stays linear in L (the fused SDPA kernel never builds
the L x L matrix under a causal mask without a mask tensor).

Loss index t is the loss of predicting token t+1 from a context of t+1 tokens.

Summaries (paper silent; Fig. 5 only shows smoothed curves): ``loss_at_multiples`` gives, for a
multiple k of the training length N, the mean loss over the contexts of length in ((k-1)N, kN],
i.e. the last N positions up to kN; ``smooth`` is a centred moving average for plotting.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import torch

from ssmax.evals.inference import device_autocast, model_device
from ssmax.host.compiling import maybe_compile
from ssmax.model import Transformer
from ssmax.model.loss import token_losses

DEFAULT_CHUNK = 8192  # rows (positions x sequences) per LM head + cross-entropy chunk
AUTO_MAX_BATCH = 64  # auto never batches more: past ~8 sequences of 20k the GPU is full


@torch.no_grad()
def per_position_loss(
    model: Transformer,
    sequences: torch.Tensor | Iterable[torch.Tensor],
    chunk: int = DEFAULT_CHUNK,
    batch_size: int | str = 1,
    compile: bool = False,
) -> torch.Tensor:
    """Mean next-token loss per position, float64 [L-1], over ``sequences``: a LongTensor
    [N, L] or any iterable of LongTensor [L] rows (streamed, ``batch_size`` rows at a time;
    "auto": as many as the device's free memory holds, ssmax.evals.per_position_loss.auto_batch)."""
    rows = iter(sequences)
    first = next(rows, None)
    if first is None or first.ndim != 1 or first.shape[0] < 2:
        shape = None if first is None else tuple(first.shape)
        raise ValueError(f"sequences must be [N, L] rows with L >= 2, got a first row of {shape}")
    rows = itertools.chain([first], rows)
    was_training = model.training
    model.eval()
    device, length = model_device(model), first.shape[0]
    losses = maybe_compile(_summed_losses, compile)
    total = torch.zeros(length - 1, dtype=torch.float64, device=device)
    n = 0
    try:
        with device_autocast(model):  # bf16 on a GPU; the CPU path is unchanged
            if batch_size == "auto":
                batch_size = auto_batch(model, length, chunk)
            while batch := list(itertools.islice(rows, int(batch_size))):
                ids = torch.stack(batch).to(device, non_blocking=True)
                total += losses(model, ids, chunk)
                n += len(batch)
    finally:
        model.train(was_training)
    return (total / n).cpu()


def _summed_losses(model: Transformer, ids: torch.Tensor, chunk: int) -> torch.Tensor:
    """Next-token losses [L-1] of a batch [b, L], summed over its sequences, float64."""
    b, length = ids.shape
    hidden = model.hidden(ids[:, :-1])  # [b, L-1, dim]: the only full-length activation
    head, step = model.lm_head.weight, max(1, chunk // b)  # positions per chunk
    parts = []
    for a in range(0, length - 1, step):
        z = min(a + step, length - 1)
        rows = token_losses(hidden[:, a:z].flatten(0, 1), head, ids[:, a + 1 : z + 1].flatten())
        parts.append(rows.view(b, z - a).double().sum(0))
    return torch.cat(parts)


@torch.no_grad()
def auto_batch(model: Transformer, length: int, chunk: int = DEFAULT_CHUNK) -> int:
    """Sequences of ``length`` tokens per forward pass: on CUDA, what 80% of the free memory
    holds, from the peak of one measured pass (bf16 autocast, as the eval runs); on the CPU one
    (batching gained nothing there)."""
    device = model_device(model)
    if device.type != "cuda":
        return 1
    probe = torch.zeros(1, length, dtype=torch.long, device=device)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    with device_autocast(model):
        _summed_losses(model, probe, chunk)
    per_sequence = max(torch.cuda.max_memory_allocated(device) - base, 1)
    free, _ = torch.cuda.mem_get_info(device)
    return max(1, min(AUTO_MAX_BATCH, int(0.8 * free // per_sequence)))


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
