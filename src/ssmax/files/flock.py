"""The one blocking file lock, for read-modify-write of files that several processes share
(the MLflow store's creation, the merge of offline node stores, the SLURM job book, the measured
rates of bench/throughput.json). Atomic writes are ssmax.files.atomic; neither shapes a result,
so a change to either leaves every fingerprint as it was (ssmax.pipeline.stage_code's
NO_RESULT lists the package)."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def exclusive(lock: str | Path) -> Iterator[None]:
    """Hold an exclusive flock on the file `lock` (created if missing) for the body: one
    process at a time, across processes and hosts sharing the filesystem. The kernel releases
    it however the holder exits, so it is never stale."""
    lock = Path(lock)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
