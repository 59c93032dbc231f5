"""The one blocking file lock, for read-modify-write of files that several processes share
(the MLflow store's creation, the SLURM job book). Atomic writes are ssmax.files.atomic; neither
shapes a result (ssmax.pipeline.stage_code's NO_RESULT)."""

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
