"""One `python -m ssmax.pipeline run` per output folder at a time.

The lock is an flock on <output_dir>/pipeline/run.lock, which names its holder (pid, host,
start time, command line). The kernel releases it when the holder exits, however it exits, so
a lock is never stale. A second `run` on the same folder says who holds it, in one line, and
exits with status 3 (BUSY); with --wait it waits for the holder to finish, then runs: what the
holder finished is cached by then. `plan` and `status` take no lock: they only read.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = "run.lock"
BUSY = 3  # the exit status of a run refused because another holds the folder


class Busy(RuntimeError):
    """Another invocation holds the output folder; the message names it."""


def lock_path(output_dir: str | Path) -> Path:
    return Path(output_dir) / "pipeline" / LOCK


def holder(path: Path) -> str:
    """Who holds the lock, as its file says."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another run (starting)"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')} on {info.get('host')} since {since} ({info.get('command')})"


@contextmanager
def pipeline_lock(
    output_dir: str | Path,
    wait: bool = False,
    log: Callable[[str], None] | None = None,
    command: str = "",
) -> Iterator[None]:
    """Hold the output folder's run lock for the body. Busy when another run holds it and
    wait is false; with wait, block until it is free (saying so once through log)."""
    path = lock_path(output_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = holder(path)
            if not wait:
                raise Busy(
                    f"{output_dir} is in use by {who}; wait for it to finish, add --wait to run "
                    "after it, or pick another paths.output_dir"
                ) from None
            if log is not None:
                log(f"waiting for {who} to release {output_dir}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                "command": (command or " ".join(sys.argv))[:300]}  # fmt: skip
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(info))
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()  # an empty file: nobody holds it
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)
