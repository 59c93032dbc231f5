"""A bundle's precision as Lightning's precision plugin applies trainer.precision to a solo
run (ssmax.lit.bundle.run): which settings a bundle runs and what wraps its forward."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

PRECISIONS = ("32-true", "32", "64-true", "bf16-mixed")


def precision_of(setting: str, device: torch.device) -> str:
    """trainer.precision for this device (auto: bf16-mixed on CUDA, else 32-true)."""
    if setting == "auto":
        return "bf16-mixed" if device.type == "cuda" else "32-true"
    if setting not in PRECISIONS:
        raise ValueError(f"trainer.precision={setting} in a bundle; allowed: auto, "
                         f"{', '.join(PRECISIONS)}")  # fmt: skip
    return setting


def forward_context(setting: str, device: torch.device) -> contextlib.AbstractContextManager:
    """What Lightning's precision plugin wraps the training step in."""
    if setting == "bf16-mixed":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if setting == "64-true":
        return _default_dtype(torch.float64)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
