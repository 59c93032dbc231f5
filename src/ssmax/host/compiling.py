"""torch.compile where it pays (`trainer.compile`: true, false, or auto).

auto compiles on a CUDA device, where the compiled model with the chunked loss trains the paper
model faster than eager, and not on the CPU, where a tiny step is no faster compiled and each
process first spends seconds compiling. Measured: docs/paper-scale.md, "Measurements behind the
code's choices".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])

# Each model (variant) and input shape is a graph of its own; the in-process pipeline runs
# many models in one process, more than dynamo's default limit of 8 graphs per function.
RECOMPILE_LIMIT = 64


def compile_enabled(setting: bool | str, device: torch.device | str) -> bool:
    """trainer.compile resolved for a device: auto means on CUDA only."""
    if setting == "auto":
        return torch.device(device).type == "cuda"
    return bool(setting)


def maybe_compile(fn: F, enabled: bool, dynamic: bool = False) -> F:
    """fn under torch.compile when enabled, else fn itself. Compiling a function (not the
    module) leaves the module's parameters and state_dict keys as they are.

    dynamic=False (training, Fig. 5): one static graph per shape, for few shapes (fixed lengths,
    SFT widths in steps of 256), rather than a symbolic-shape graph whose guards on the chunk
    count recompile anyway. dynamic=True (NIAH decoding): one graph for every prompt length and
    one for every cache length, where a static graph per shape would compile ~30 of each."""
    if not enabled:
        return fn
    config = torch._dynamo.config
    config.cache_size_limit = max(config.cache_size_limit, RECOMPILE_LIMIT)
    return torch.compile(fn, dynamic=dynamic)  # type: ignore[return-value]
