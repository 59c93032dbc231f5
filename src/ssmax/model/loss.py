"""Next-token losses taken from the final hidden states, the LM head and the cross-entropy one
chunk of positions at a time: the [B, T, vocab] logits never exist whole. At paper scale the bf16
logits of one 64 x 1024 batch are 6.6 GB and their fp32 upcast twice that. Compiled with the
model (ssmax.host.compiling), each chunk's head output feeds its softmax directly
(docs/paper-scale.md, performance).

Logits are upcast to float32 per chunk, and the cross-entropy is taken on [rows, vocab] (the
[batch, vocab, positions] layout runs a slow spatial softmax kernel on CUDA).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from ssmax.model.transformer import Transformer

IGNORE = -100  # label of a position that is not scored (SFT prompts, padding)
DEFAULT_CHUNK = 8192  # positions per chunk (trainer.loss_chunk)


def token_losses(hidden: torch.Tensor, head: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per row [rows] (0 where the label is IGNORE; at least float32) of hidden
    [rows, dim] under the LM head's weight [vocab, dim]."""
    logits = F.linear(hidden, head)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 -> fp32
    return F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="none")


def summed_loss(
    hidden: torch.Tensor, head: torch.Tensor, labels: torch.Tensor, chunk: int
) -> torch.Tensor:
    """The sum of the next-token losses of hidden [B, T, dim] against labels [B, T] (at least
    float32), over chunks of ``chunk`` positions."""
    flat, targets = hidden.flatten(0, 1), labels.flatten()
    dtype = torch.promote_types(hidden.dtype, torch.float32)
    total = torch.zeros((), dtype=dtype, device=hidden.device)
    for a in range(0, targets.numel(), chunk):
        total = total + token_losses(flat[a : a + chunk], head, targets[a : a + chunk]).sum()
    return total


def objective_loss(total: torch.Tensor, labels: torch.Tensor, objective: str) -> torch.Tensor:
    """pretrain: the mean next-token loss. sft: the sum of the token losses over the answer span
    (Sec. 3.3), averaged over the sequences of the batch so the scale is batch-independent."""
    if objective == "sft":
        return total / labels.shape[0]
    return total / (labels != IGNORE).sum().clamp(min=1)


def model_loss(
    model: Transformer,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    objective: str,
    chunk: int = DEFAULT_CHUNK,
) -> torch.Tensor:
    """The objective's loss of the model on one batch, taken chunk by chunk (never the logits)."""
    total = summed_loss(model.hidden(input_ids), model.lm_head.weight, labels, chunk)
    return objective_loss(total, labels, objective)
