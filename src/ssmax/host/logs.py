"""What a process prints: Lightning's adverts, and its warnings that no user can act on, left
out of its logs.

Lightning prints "💡 Tip: For seamless cloud logging and experiment tracking, try installing
litlogger ..." once a Trainer: in every node's log and, in process, once a node on the
pipeline's console; and two warnings (NOT_ACTIONABLE). Its other lines (devices, seeds, why fit
stopped) and every other warning stay. Installed by the entries that train (ssmax.train, the
pipeline's node runner), outside the stages' code: a change here moves no node's fingerprint."""

from __future__ import annotations

import logging
import warnings

# the loggers lightning_utilities' rank_zero_info writes to, as Lightning names them
RANK_ZERO = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _NoAdverts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip:")


_NO_ADVERTS = _NoAdverts()

NOT_ACTIONABLE = (
    # lightning 2.6's utilities/_pytree.py asks torch 2.13's pytree the deprecated way
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",
    # where SLURM is installed: the pipeline starts its SLURM jobs through submitit (srun
    # there); the in-process and local executors train outside any allocation on purpose
    r"The `srun` command is available on your system but is not used",
)


def quiet_lightning_tips() -> None:
    """Drop Lightning's tips from its rank-zero loggers and its NOT_ACTIONABLE warnings
    (idempotent; before or after its import)."""
    for name in RANK_ZERO:
        logging.getLogger(name).addFilter(_NO_ADVERTS)
    for message in NOT_ACTIONABLE:
        warnings.filterwarnings("ignore", message=message)
