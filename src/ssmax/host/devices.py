"""trainer.accelerator against the machine: a GPU asked for where none is visible is refused in
one line before any work (the command lines, the evals), not a traceback after files are made."""

from __future__ import annotations

import torch

from ssmax.config.compose import ConfigError
from ssmax.config.schema import ACCELERATORS


def uses_cuda(accelerator: str) -> bool:
    """Whether trainer.accelerator runs on CUDA here (auto: when a GPU is visible); ConfigError
    for an unknown value or a GPU asked for and not there."""
    if accelerator not in ACCELERATORS:
        raise ConfigError(f"trainer.accelerator={accelerator!r}; allowed: {ACCELERATORS}")
    cuda = torch.cuda.is_available()
    if accelerator in ("gpu", "cuda") and not cuda:
        raise ConfigError(
            f"trainer.accelerator={accelerator} but no CUDA device is visible here; "
            "allowed on this machine: auto, cpu"
        )
    return cuda and accelerator != "cpu"
