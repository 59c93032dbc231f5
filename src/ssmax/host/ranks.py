"""Where this process stands among the processes of one run, known before any Trainer exists."""

from __future__ import annotations

import os


def global_rank() -> int:
    """This process's rank among all processes of a multi-process (DDP) run; 0 when alone.
    Read from the environment (torchrun's RANK, SLURM's SLURM_PROCID) like Lightning does, so
    that it is known before any Trainer exists."""
    for var in ("RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0
