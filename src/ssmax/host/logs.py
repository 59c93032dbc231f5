"""What a process prints: Lightning's adverts left out of its logs.

Lightning prints "💡 Tip: For seamless cloud logging and experiment tracking, try installing
litlogger ..." once a Trainer: in every node's log and, in process, once a node on the
pipeline's console. Its other lines (devices, seeds, why fit stopped) stay. Installed by the
entries that train (ssmax.train, the pipeline's node runner), outside the stages' code: a
change here moves no node's fingerprint."""

from __future__ import annotations

import logging

# the loggers lightning_utilities' rank_zero_info writes to, as Lightning names them
RANK_ZERO = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


class _NoAdverts(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip:")


_NO_ADVERTS = _NoAdverts()


def quiet_lightning_tips() -> None:
    """Drop Lightning's tips from its rank-zero loggers (idempotent; before or after its import)."""
    for name in RANK_ZERO:
        logging.getLogger(name).addFilter(_NO_ADVERTS)
