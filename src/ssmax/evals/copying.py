"""Copy probe (a diagnostic, not in the paper): can the model copy a span it has just seen?

Random token spans, each shown twice in a row: the loss on the repeat against the loss on the
first copy. A model with induction ("copying") heads predicts the repeat, a gain of several
nats; one without them does no better the second time (gain ~0). Reading a 7-digit number
back out of a haystack needs this ability, so the gain says whether a NIAH accuracy of 0 is
the variant's failure or the scale's.
"""

from __future__ import annotations

import torch

from ssmax.evals.per_position_loss import per_position_loss
from ssmax.model import Transformer


@torch.no_grad()
def copy_gain(
    model: Transformer,
    vocab_size: int,
    eos_id: int,
    span: int,
    count: int,
    seed: int = 0,
) -> dict[str, float]:
    """{"first", "repeat", "gain"}: mean next-token loss (nats) inside the first copy, inside
    the repeat (its first token excluded: nothing predicts it), and first - repeat."""
    if span < 2 or count < 1:
        raise ValueError(f"copy probe: span must be >= 2 and count >= 1, got {span}, {count}")
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab_size - 1, (count, span), generator=gen)
    tokens += (tokens >= eos_id).long()  # any id but EOS
    loss = per_position_loss(model, torch.cat([tokens, tokens], dim=1), batch_size=count)
    first = loss[: span - 1].mean().item()  # targets x[1 .. span-1]
    repeat = loss[span:].mean().item()  # targets x[span+1 .. 2 span-1]
    return {"first": first, "repeat": repeat, "gain": first - repeat}
