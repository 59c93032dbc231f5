"""Small helpers shared by the evals."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ssmax.model import Transformer

PAPER_THETA_FACTOR = 50.0  # Sec. 3.2/3.3: theta 10,000 -> 500,000 for every eval, no retraining


@contextmanager
def scaled_rope_theta(model: Transformer, factor: float = PAPER_THETA_FACTOR) -> Iterator[None]:
    """Run the body with RoPE theta multiplied by ``factor``; restores it afterwards."""
    old = model.rope_theta
    model.rope_theta = old * factor  # angles are rebuilt from this on every call
    try:
        yield
    finally:
        model.rope_theta = old


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@contextmanager
def device_autocast(model: torch.nn.Module) -> Iterator[None]:
    """bf16 autocast while the model sits on a CUDA device (as it trained: App. B, C); on the
    CPU nothing changes (fp32, or whatever dtype the model has)."""
    if model_device(model).type != "cuda":
        yield
        return
    with torch.autocast("cuda", dtype=torch.bfloat16):
        yield
